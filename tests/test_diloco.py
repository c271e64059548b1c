"""Issue #24: DiLoCo (Douillard et al. 2023) as a registered replica loop: against plain SGD, against its
equations worked by hand, its exchanges counted, and chosen by name from the API, the CLI and the simulator."""

import json
import subprocess
import sys

import numpy as np
import pytest

import dbkit
from dbkit.after.diloco import DiLoCoReplica
from dbkit.config import RunConfig
from dbkit.data import MiniBatches, load
from dbkit.nn import build
from dbkit.ps import local_shards, make_rule
from dbkit.runtime import InProcessCluster

DIGITS = load("digits", seed=0)
NET = build("mlp", DIGITS.n_features, DIGITS.n_classes, hidden=(16,), l2=0.0)
X, Y = DIGITS.X_train[:600], DIGITS.y_train[:600]


def _replica(server, **knobs) -> DiLoCoReplica:
    return DiLoCoReplica(0, NET, X, Y, server, 16, lr=knobs.pop("lr", 0.05), seed=3, overlap=False, **knobs)


def test_diloco_with_one_inner_sgd_step_and_outer_sgd_at_rate_one_is_plain_sgd():
    start = NET.init_params(0)
    server = local_shards(start, 2, "sgd", 1.0)  # the outer rate: the shards' lr
    replica = _replica(server, inner_steps=1, inner_optimizer="sgd", outer_lr=1.0, lr=0.05)
    for _ in range(25):
        replica.step()
    p, batches = start.copy(), MiniBatches(X, Y, 16, seed=3)  # the reference: the same batches, plain SGD
    for _ in range(25):
        xb, yb = next(batches)
        _, g = NET.loss_and_grad(p, xb, yb)
        p -= np.float32(0.05) * g
    np.testing.assert_allclose(server.fetch(), p, rtol=1e-4, atol=1e-6)
    assert not np.allclose(server.fetch(), start, atol=1e-3)  # it moved


def test_diloco_with_two_inner_adamw_steps_and_nesterov_outside_follows_its_equations():
    # Algorithm 1 of Douillard et al., written out: AdamW's moments carry over from round to round.
    lr, outer, mu, wd, b1, b2, eps = 0.01, 0.7, 0.9, 0.1, 0.9, 0.999, 1e-8
    start = NET.init_params(1)
    server = local_shards(start, 2, make_rule("nesterov", outer, momentum=mu), outer)
    replica = _replica(server, inner_steps=2, outer_lr=outer, weight_decay=wd, lr=lr)
    for _ in range(6):  # three rounds
        replica.step()
    theta, v = start.astype(np.float64), np.zeros(NET.size)
    m, s, t = np.zeros(NET.size), np.zeros(NET.size), 0
    batches = MiniBatches(X, Y, 16, seed=3)
    for _ in range(3):
        x = theta.copy()
        for _ in range(2):
            xb, yb = next(batches)
            _, g = NET.loss_and_grad(x.astype(np.float32), xb, yb)
            t += 1
            m, s = b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g * g
            x = x - lr * wd * x
            x = x - lr * (m / (1 - b1**t)) / (np.sqrt(s / (1 - b2**t)) + eps)
        delta = theta - x  # the outer gradient
        v = mu * v + delta
        theta = theta - outer * (delta + mu * v)
    np.testing.assert_allclose(server.fetch(), theta, rtol=1e-3, atol=2e-5)


def test_diloco_exchanges_once_a_round_and_a_flush_pushes_the_round_so_far():
    server = local_shards(NET.init_params(0), 2, "sgd", 0.5)
    replica = _replica(server, inner_steps=4, inner_optimizer="sgd", outer_lr=0.5)
    for _ in range(12):
        replica.step()
    figures = [s.figures() for s in server.shards]
    assert [f.version for f in figures] == [3, 3]  # one push per round of 4 steps
    assert replica.counters.fetches == 4  # the first fetch and one with each push
    assert sum(f.bytes_pushed for f in figures) == 3 * NET.size * 4
    assert [f.examples for f in figures] == [3 * 4 * 16] * 2  # each push sums its round's examples
    replica.step()
    replica.flush()  # a pause: the one step taken is pushed, and the next round starts from the shards
    assert [s.figures().version for s in server.shards] == [4, 4]
    replica.step()
    assert replica.counters.fetches == 5


def test_diloco_is_chosen_by_name_with_its_own_settings_and_refused_where_it_cannot_run():
    c = RunConfig.make(algorithm="downpour", replica="diloco", optimizer="nesterov", inner_steps=4, outer_lr=0.3)
    assert c.shard_lr() == 0.3 and c.rule() == make_rule("nesterov", 0.3)  # the shards apply the outer rate
    assert c.replica_settings() == {"inner_steps": 4, "outer_lr": 0.3}
    with pytest.raises(ValueError, match="inner_steps must be a whole number in \\[1, 100000\\], got 0"):
        c.replace(inner_steps=0)
    with pytest.raises(ValueError, match="inner_steps is not a setting of optimizer 'nesterov' or replica 'downpour'"):
        RunConfig.make(algorithm="downpour", optimizer="nesterov", inner_steps=4)
    with pytest.raises(ValueError, match="runs in downpour with whole replicas"):
        RunConfig.make(algorithm="downpour", replica="diloco", partitions=2, shards=2)


def test_a_diloco_job_trains_in_process_and_its_report_names_the_loop():
    with InProcessCluster(2) as m, dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=2, replica="diloco",
                                                     optimizer="nesterov", lr=0.003, outer_lr=0.35,
                                                     inner_steps=5) as job:
        job.fit(steps=300, progress=False)
    report = job.report()
    assert report["config"]["replica_loop"]["name"] == "diloco"
    assert report["config"]["replica_loop"]["settings"]["inner_steps"] == 5
    assert report["config"]["rule"] == {"name": "nesterov", "lr": 0.35, "settings": {"momentum": 0.9}}
    for r in report["replicas"]:  # a push a round, and one more for the round a pause or the stop cut short
        assert r["steps"] // 5 <= r["pushes"] <= r["steps"] // 5 + 2
    assert sum(s["updates"] for s in report["shards"]) / 2 == sum(r["pushes"] for r in report["replicas"])
    assert report["final"]["test_accuracy"] > 0.7


def test_a_simulated_diloco_run_uses_the_same_loop():
    from dbkit.sim import Cluster

    with dbkit.DownpourSGD("linear", "digits", cluster=Cluster(), replicas=3, replica="diloco", optimizer="sgd",
                           lr=0.05, outer_lr=1.0, inner_steps=4, inner_optimizer="sgd") as job:
        job.fit(steps=120, progress=False)
    report = job.report()
    assert report["simulated"] and report["config"]["replica_loop"]["name"] == "diloco"
    for r in report["replicas"]:
        assert r["steps"] // 4 <= r["pushes"] <= r["steps"] // 4 + 2


def test_the_command_line_runs_diloco(tmp_path):
    out = tmp_path / "d.json"
    run = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--replica", "diloco", "--optimizer",
                          "nesterov", "--inner-steps", "4", "--outer-lr", "0.5", "--lr", "0.003", "--steps", "80",
                          "--runtime", "in-process", "--quiet", "--report", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["config"]["replica_loop"]["settings"]["inner_steps"] == 4
    assert report["config"]["knobs"] == {"inner_steps": 4, "outer_lr": 0.5}
