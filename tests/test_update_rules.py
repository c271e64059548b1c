"""Issue #24: the update-rule extension point, the staleness-aware rule and Nesterov momentum, each against a
reference worked out by hand; and the walkthrough of docs/extending.md, run as written."""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dbkit
from dbkit.config import RunConfig
from dbkit.ps import ParameterShard, UpdateRule, describe_rules, make_rule, register_rule, registered_rules
from dbkit.runtime import InProcessCluster
from dbkit.settings import Setting

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(24)


def _grads(n: int, size: int = 50) -> list[np.ndarray]:
    return [RNG.standard_normal(size).astype(np.float32) for _ in range(n)]


def _shard(optimizer, lr: float, size: int = 50) -> ParameterShard:
    return ParameterShard(0, 0, size, np.linspace(-1, 1, size, dtype=np.float32), optimizer, lr)


def _push_at_staleness(shard: ParameterShard, grad: np.ndarray, staleness: int) -> None:
    """Push ``grad`` as if fetched ``staleness`` versions ago (the shard must be at least that far on)."""
    answer = shard.push(grad, shard.version - staleness)
    assert answer.accepted and answer.staleness == staleness


def test_the_staleness_aware_rule_at_staleness_one_is_sgd_bit_for_bit():
    # Zhang et al. 2016: lr / tau; a fresh push (tau 0) and tau 1 both take the whole step.
    aware, sgd = _shard("staleness-aware", 0.1), _shard("sgd", 0.1)
    for i, g in enumerate(_grads(6)):
        _push_at_staleness(aware, g, 1 if i else 0)
        sgd.push(g, sgd.version)
    assert np.array_equal(aware.params, sgd.params)


@pytest.mark.parametrize("k", [2, 3, 7])
def test_the_staleness_aware_rule_at_staleness_k_is_sgd_at_lr_over_k(k):
    aware = _shard("staleness-aware", 0.3)
    by_hand = aware.params.copy()
    for i, g in enumerate(_grads(k + 4)):
        tau = min(i, k)  # the first pushes cannot be k versions stale yet
        _push_at_staleness(aware, g, tau)
        by_hand -= np.float32(0.3 / max(1, tau)) * g
    assert np.array_equal(aware.params, by_hand)
    assert aware.figures().staleness.counts  # the shard counted each push's staleness as applied


def test_nesterov_momentum_follows_its_equations_worked_by_hand():
    # v = mu v + g; p -= lr (g + mu v): PyTorch's SGD(nesterov=True), in float64 beside the shard's float32
    shard = _shard(make_rule("nesterov", 0.5, momentum=0.8), 0.5)
    p = shard.params.astype(np.float64)
    v = np.zeros_like(p)
    for g in _grads(5):
        shard.push(g, shard.version)
        v = 0.8 * v + g
        p = p - 0.5 * (g + 0.8 * v)
    np.testing.assert_allclose(shard.params, p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(shard.state()["opt_state"], v, rtol=1e-5, atol=1e-6)
    # momentum 0 is plain SGD
    plain, sgd = _shard(make_rule("nesterov", 0.5, momentum=0.0), 0.5), _shard("sgd", 0.5)
    for g in _grads(3):
        plain.push(g, plain.version)
        sgd.push(g, sgd.version)
    np.testing.assert_allclose(plain.params, sgd.params, rtol=1e-6)


def test_a_rule_keeps_its_knobs_and_state_through_a_checkpoint_and_a_new_lr(tmp_path):
    shard = _shard(make_rule("nesterov", 0.2, momentum=0.6), 0.2)
    for g in _grads(3):
        shard.push(g, shard.version)
    shard.save(str(tmp_path), "m")
    from dbkit.ps import read_shard, shard_file

    saved = read_shard(shard_file(tmp_path, 0), "m")
    assert (saved.optimizer, saved.rule_settings) == ("nesterov", {"momentum": 0.6})
    fresh = _shard("sgd", 0.1)
    fresh.load_state(saved.as_state())
    assert fresh.rule == make_rule("nesterov", 0.2, momentum=0.6)
    assert np.array_equal(fresh.opt_state, shard.opt_state)
    fresh.set_lr(0.05)  # a new rate keeps the rule's knobs and state
    assert fresh.rule == make_rule("nesterov", 0.05, momentum=0.6)
    assert np.array_equal(fresh.opt_state, shard.opt_state)


# ---- the extension point -----------------------------------------------------------------------------

def _walkthrough() -> str:
    text = (ROOT / "docs" / "extending.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)[0]


def test_the_walkthrough_rule_is_under_sixty_lines():
    code = _walkthrough()
    assert "register_rule" in code and "def apply" in code
    assert len(code.strip().splitlines()) < 60


@pytest.fixture(scope="module")
def heavy_ball(tmp_path_factory):
    """The walkthrough's file, as a researcher saves it, loaded through ``load_extension``."""
    from dbkit.extensions import load_extension

    folder = tmp_path_factory.mktemp("extension")
    path = folder / "heavy_ball.py"
    path.write_text(_walkthrough())
    load_extension(str(path))
    return path


def test_the_walkthrough_rule_follows_its_equation(heavy_ball):
    shard = _shard(make_rule("heavy-ball", 0.1, beta=0.5), 0.1)
    p, v = shard.params.astype(np.float64), np.zeros(50)
    for i, g in enumerate(_grads(6)):
        tau = min(i, 2)
        _push_at_staleness(shard, g, tau)
        v = 0.5 * v + g / max(1, tau)
        p = p - 0.1 * v
    np.testing.assert_allclose(shard.params, p, rtol=1e-5, atol=1e-6)


def test_a_registered_rule_trains_by_name_and_appears_in_the_report(heavy_ball):
    assert "heavy-ball" in registered_rules() and "heavy-ball" in describe_rules()
    with InProcessCluster(2) as m, dbkit.DownpourSGD("linear", "digits", cluster=m, replicas=2, shards=2,
                                                     optimizer="heavy-ball", beta=0.8, lr=0.02) as job:
        job.fit(steps=200, progress=False)
        job.set(beta=0.5)  # steered as the optimizer is: the shards keep the velocity
        job.fit(steps=100, progress=False)
    report = job.report()
    assert report["config"]["rule"] == {"name": "heavy-ball", "lr": 0.02, "settings": {"beta": 0.5}}
    assert all(s["optimizer"] == "heavy-ball" for s in report["shards"])
    assert report["final"]["test_accuracy"] > 0.6  # it learns: the untrained linear model is near 0.1
    assert sum(s["updates"] for s in report["shards"]) >= 2 * 300


def test_a_registered_rule_is_refused_out_of_range_on_another_rule_or_under_a_taken_name(heavy_ball):
    with pytest.raises(ValueError, match=r"beta must be a finite number in \[0, 0.999\], got 1.5"):
        RunConfig.make(algorithm="downpour", optimizer="heavy-ball", beta=1.5)
    with pytest.raises(ValueError, match="beta is not a setting of optimizer 'sgd'"):
        RunConfig.make(algorithm="downpour", optimizer="sgd", beta=0.5)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        RunConfig.make(optimizer="no-such-rule")
    from dataclasses import dataclass
    from typing import ClassVar

    @dataclass(frozen=True)
    class Impostor(UpdateRule):
        name: ClassVar[str] = "heavy-ball"

        def apply(self, params, grad, state, staleness):
            params -= grad

    with pytest.raises(ValueError, match="'heavy-ball' is taken"):
        register_rule(Impostor)

    @dataclass(frozen=True)
    class Clash(UpdateRule):
        name: ClassVar[str] = "clash"
        knobs: ClassVar[tuple[Setting, ...]] = (Setting("beta", "int", 0, 5, help="another meaning"),)
        beta: int = 1

        def apply(self, params, grad, state, staleness):
            params -= grad

    with pytest.raises(ValueError, match="knob 'beta' is already a setting of another meaning"):
        register_rule(Clash)
    assert "clash" not in registered_rules()


def test_a_rule_switched_away_from_keeps_no_stray_knob():
    c = RunConfig.make(algorithm="downpour", optimizer="nesterov", momentum=0.5)
    assert c.replace(optimizer="adagrad").knobs == ()  # momentum was nesterov's, not adagrad's
    assert c.replace(lr=0.2).get("momentum") == 0.5
    assert RunConfig.make(algorithm="downpour", optimizer="nesterov").get("momentum") == 0.9  # its default


def test_the_command_line_loads_an_extension_file_lists_it_and_trains_with_it_on_a_local_cluster(heavy_ball, tmp_path):
    # a LocalCluster of worker processes: they import the researcher's file through the inherited path
    out = tmp_path / "hb.json"
    run = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension", str(heavy_ball),
                          "--optimizer", "heavy-ball", "--beta", "0.7", "--lr", "0.02", "--model", "linear",
                          "--steps", "120", "--quiet", "--report", str(out)],
                         capture_output=True, text=True, timeout=300, env={**_env(), "DBKIT_SMALL": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["config"]["rule"]["settings"] == {"beta": 0.7} and report["cluster"]["kind"] != "in-process"
    assert all(s["optimizer"] == "heavy-ball" and s["updates"] > 0 for s in report["shards"])
    help_text = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension", str(heavy_ball),
                                "--help"], capture_output=True, text=True, timeout=60, env=_env()).stdout
    assert "heavy-ball: Heavy-ball momentum" in help_text and "--beta BETA" in help_text
    bad = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension", str(heavy_ball),
                          "--optimizer", "heavy-ball", "--beta", "1.5", "--runtime", "in-process"],
                         capture_output=True, text=True, timeout=60, env=_env())
    assert bad.returncode == 2 and "beta must be a finite number in [0, 0.999], got 1.5" in bad.stderr
    missing = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension",
                              str(tmp_path / "nowhere.py")], capture_output=True, text=True, timeout=60, env=_env())
    assert missing.returncode == 2 and "nowhere.py: no such file" in missing.stderr


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
