"""Issue #24: elastic averaging SGD (Zhang, Choromanska and LeCun 2015) as a registered replica loop, against
the paper's Algorithm 1 worked by hand."""

import numpy as np
import pytest

import dbkit
from dbkit.after.easgd import EASGDReplica
from dbkit.config import RunConfig
from dbkit.data import MiniBatches, load
from dbkit.nn import build
from dbkit.ps import ShardedParameters, local_shards
from dbkit.runtime import InProcessCluster

DIGITS = load("digits", seed=0)
NET = build("mlp", DIGITS.n_features, DIGITS.n_classes, hidden=(16,), l2=0.0)
X, Y = DIGITS.X_train[:600], DIGITS.y_train[:600]
LR = 0.05


def _replica(index: int, server, **knobs) -> EASGDReplica:
    rows = slice(300 * index, 300 * (index + 1))
    own = ShardedParameters(server.shards, server.layout, name=f"replica{index}")  # each replica its own client
    return EASGDReplica(index, NET, X[rows], Y[rows], own, 16, lr=LR, seed=index, overlap=False, **knobs)


def _batches(index: int) -> MiniBatches:
    rows = slice(300 * index, 300 * (index + 1))
    return MiniBatches(X[rows], Y[rows], 16, seed=index)


def test_two_replicas_and_the_centre_follow_algorithm_one_worked_by_hand():
    alpha, tau = 0.3, 2
    start = NET.init_params(0)
    server = local_shards(start, 2, "sgd", alpha)  # the shards move the centre at the rate alpha
    replicas = [_replica(i, server, tau=tau, alpha=alpha) for i in (0, 1)]
    centre = start.astype(np.float64)
    x = [start.astype(np.float64), start.astype(np.float64)]
    batches, t = [_batches(0), _batches(1)], [0, 0]
    for _ in range(5):  # the replicas take turns: A, B, A, B ...
        for i in (0, 1):
            replicas[i].step()
            before = x[i].copy()
            xb, yb = next(batches[i])
            _, g = NET.loss_and_grad(before.astype(np.float32), xb, yb)
            if t[i] % tau == 0:  # a) and b), with the same centre read
                d = alpha * (before - centre)
                x[i] = x[i] - d
                centre = centre + d
            x[i] = x[i] - LR * g  # the gradient at x before the pull
            t[i] += 1
    np.testing.assert_allclose(server.fetch(), centre, rtol=1e-5, atol=1e-6)
    for i in (0, 1):
        np.testing.assert_allclose(replicas[i].params, x[i], rtol=1e-5, atol=1e-6)
    assert not np.allclose(replicas[0].params, replicas[1].params, atol=1e-3)  # each keeps its own


def test_with_alpha_one_the_symmetric_update_swaps_the_replica_and_the_centre():
    # The paper's symmetric update at alpha = 1: the centre takes the replica's parameters before the step and
    # the replica the centre's, so one replica's centre is not plain SGD's: it holds each step's start.
    start = NET.init_params(2)
    server = local_shards(start, 1, "sgd", 1.0)
    replica = _replica(0, server, tau=1, alpha=1.0)
    for _ in range(4):
        before = server.fetch() if replica.params is None else replica.params.copy()
        replica.step()
        np.testing.assert_allclose(server.fetch(), before, rtol=1e-6, atol=1e-7)


def test_a_replica_exchanges_every_tau_steps_and_only_the_elastic_difference_travels():
    server = local_shards(NET.init_params(0), 2, "sgd", 0.1)
    replica = _replica(0, server, tau=3, alpha=0.1)
    for _ in range(10):
        replica.step()
    assert [s.figures().version for s in server.shards] == [4, 4]  # steps 0, 3, 6 and 9
    assert replica.counters.fetches == 1 + 4  # the start, and each exchange
    assert sum(s.figures().bytes_pushed for s in server.shards) == 4 * NET.size * 4


def test_easgd_is_chosen_by_name_and_refused_with_a_rule_that_would_bend_its_elastic_force():
    c = RunConfig.make(algorithm="downpour", replica="easgd", optimizer="sgd", alpha=0.2, tau=8)
    assert c.shard_lr() == 0.2 and c.replica_settings() == {"alpha": 0.2, "tau": 8}
    with pytest.raises(ValueError, match="replica 'easgd' is meant for optimizer 'sgd', got optimizer='adagrad'"):
        RunConfig.make(algorithm="downpour", replica="easgd", optimizer="adagrad")
    with pytest.raises(ValueError, match=r"alpha must be a finite number in \(0, 1\], got 1.5"):
        c.replace(alpha=1.5)


def test_an_easgd_job_trains_in_process_and_its_report_names_the_loop():
    with InProcessCluster(2) as m, dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=3, replica="easgd",
                                                     optimizer="sgd", lr=0.05, alpha=0.1, tau=4) as job:
        job.fit(steps=450, progress=False)
    report = job.report()
    assert report["config"]["replica_loop"] == {"name": "easgd", "settings": {"tau": 4, "alpha": 0.1}}
    assert report["config"]["rule"]["lr"] == 0.1  # the shards move the centre at alpha
    for r in report["replicas"]:
        assert -(-r["steps"] // 4) <= r["pushes"] <= -(-r["steps"] // 4) + 1
    assert report["final"]["test_accuracy"] > 0.8  # the centre learns from elastic differences alone
