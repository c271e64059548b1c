"""Issue #48, defect 3: an output never replaces an input. ``dbkit simulate downpour --profile p.json --report
p.json`` exited 0 with the profile overwritten, and ``--report my_rule.py`` replaced an extension's source with
JSON. Each case is refused with exit 2 in one line, before anything runs, and every input is left as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dbkit.cli.main import main
from dbkit.runtime.sim.profile import PACKAGED

RULE = '''
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dbkit.ps import UpdateRule, register_rule


@register_rule
@dataclass(frozen=True)
class OutputsTestSGD(UpdateRule):
    name: ClassVar[str] = "outputs-test-sgd"

    def apply(self, params, grad, state, staleness):
        params -= np.float32(self.lr) * grad
'''


def _profile(folder: Path) -> Path:
    path = folder / "p.json"
    path.write_text((PACKAGED / "here.json").read_text())
    return path


def _rule(folder: Path) -> Path:
    path = folder / "outputs_rule.py"
    path.write_text(RULE)
    return path


def _checkpoint_named_dataset(folder: Path) -> Path:
    (folder / "ck").mkdir()
    path = folder / "ck" / "shard-0.npz"
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((40, 4)).astype(np.float32), np.arange(40) % 3
    np.savez(path, X_train=X, y_train=y, X_test=X[:10], y_test=y[:10])
    return path


CASES = {
    "simulate downpour: report over its profile": (["simulate", "downpour", "--profile", "{p}", "--report", "{p}"],
                                                   _profile, "would overwrite the input --profile file"),
    "simulate fig3: report over its profile": (["simulate", "fig3", "--profile", "{p}", "--report", "{p}"],
                                               _profile, "would overwrite the input --profile file"),
    "simulate downpour: plot over its profile through ..": (
        ["simulate", "downpour", "--profile", "{p}", "--plot", "{tmp}/sub/../p.json"], _profile,
        "would overwrite the input --profile file"),
    "run: report over its extension": (["run", "downpour", "--extension", "{p}", "--report", "{p}"], _rule,
                                       "would overwrite the input --extension file"),
    "run: report over a symbolic link to its extension": (
        ["run", "downpour", "--extension", "{p}", "--report", "{tmp}/link.py"], _rule,
        "would overwrite the input --extension file"),
    "run: report over a hard link to its dataset": (
        ["run", "sgd", "--model", "linear", "--dataset", "{p}", "--report", "{tmp}/hard.json"],
        _checkpoint_named_dataset, "would overwrite the input --dataset file"),
    "run: checkpoints over its dataset": (["run", "downpour", "--dataset", "{p}", "--checkpoint-dir", "{tmp}/ck"],
                                          _checkpoint_named_dataset, "--checkpoint-dir"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_output_over_an_input_is_refused_with_exit_2_and_the_input_is_unchanged(case, tmp_path, capsys):
    args, make, says = CASES[case]
    made = make(tmp_path)
    (tmp_path / "sub").mkdir()
    os.symlink(made, tmp_path / "link.py")
    os.link(made, tmp_path / "hard.json")
    before = made.read_bytes()
    argv = [a.format(p=made, tmp=tmp_path) for a in args]
    budget = [] if argv[0] == "simulate" and argv[1] == "fig3" else ["--steps", "5"]
    status = main([*argv, *budget, "--quiet"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith("dbkit: error: ") and says in lines[0], err
    assert made.read_bytes() == before  # the input as it was


def test_an_output_beside_an_input_is_written(tmp_path, capsys):
    """The check compares files, not folders: a report next to the profile it was simulated with is written."""
    profile = _profile(tmp_path)
    before = profile.read_bytes()
    status = main(["simulate", "downpour", "--profile", str(profile), "--report", str(tmp_path / "r.json"),
                   "--steps", "5", "--quiet"])
    assert status == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "r.json").read_text())["simulated"] and profile.read_bytes() == before
