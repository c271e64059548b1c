"""Downpour SGD on a real LocalCluster: exactness, accuracy, steering, failures, cleanup."""

import os
import signal
import time

import pytest

from dbkit import data, nn
from dbkit.algorithms import DownpourReplica, SyncSGD
from dbkit.cluster import Cluster
from dbkit.cluster.downpour import ChangeInProgress, DownpourSGD
from dbkit.config import RunConfig
from dbkit.ps import local_shards
from dbkit.telemetry import validate_report


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def _pushes(d):
    return {i: f["pushes"] for i, f in d.book.figures().items()}


def test_replica_in_process_equals_sync_sgd(digits):
    cfg = RunConfig(steps=40, lr=0.05)
    net = nn.build("mlp", 64, 10, l2=cfg.l2)
    base = SyncSGD(net, digits, cfg)
    base.fit()
    server = local_shards(net.init_params(0), 2, "sgd", 0.05)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 32, seed=0)
    for _ in range(40):
        replica.step()
    assert server.fetch().tobytes() == base.params.tobytes()


def test_replica_accumulates_and_pushes_every_n_push(digits):
    net = nn.build("linear", 64, 10)
    server = local_shards(net.init_params(0), 1, "sgd", 0.01)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_fetch=3, n_push=4, lr=0.01)
    for _ in range(12):
        replica.step()
    # fetches before steps 1, 4, 7, 10 and, combined with the push after step 12, for step 13
    assert (replica.pushes, replica.fetches) == (3, 5)
    assert server.shards[0].version == 3
    replica.configure(n_push=1)
    replica.step()
    assert (replica.pushes, replica.fetches) == (4, 5)
    with pytest.raises(ValueError, match="n_fetch"):
        replica.configure(n_fetch=0)
    assert replica.n_fetch == 3


def test_one_replica_one_shard_reproduces_sync_sgd_exactly(digits, local_cluster):
    cfg = RunConfig(algorithm="downpour", steps=60, lr=0.05, optimizer="sgd", replicas=1, shards=1)
    net = nn.build("mlp", 64, 10, l2=cfg.l2)
    base = SyncSGD(net, digits, cfg)
    base.fit()
    with DownpourSGD(net, digits, config=cfg, client=local_cluster.client) as d:
        d.fit(steps=60)
        params = d.current_params()
        assert d.total_steps() == 60
    assert params.tobytes() == base.params.tobytes()


def test_three_replicas_adagrad_on_digits(digits, local_cluster):
    with DownpourSGD("mlp", digits, replicas=3, shards=2, optimizer="adagrad", lr=0.05,
                     client=local_cluster.client, eval_every=200) as d:
        d.fit(steps=1200)
    report = d.report()
    assert validate_report(report) == []
    assert report["final"]["test_accuracy"] >= 0.93
    assert len(report["replicas"]) == 3 and all(r["pushes"] > 0 for r in report["replicas"])
    assert max(s["staleness"]["max"] for s in report["shards"]) > 0  # really asynchronous
    assert sum(s["updates"] for s in report["shards"]) == 2 * sum(r["pushes"] for r in report["replicas"])
    assert len(report["history"]) >= 2 and report["bytes"]["pushed"] > 0


def test_set_changes_fetch_and_push_rates_while_running(digits, local_cluster):
    with DownpourSGD("linear", digits, replicas=2, shards=2, n_fetch=1, n_push=1, optimizer="sgd", lr=0.02,
                     client=local_cluster.client) as d:
        d.fit(steps=100)
        f0 = d.book.figures()
        assert all(f["pushes"] == f["steps"] for f in f0.values())
        d.start()
        d.set(n_fetch=5, n_push=5)
        d.fit(steps=300)
        f1 = d.book.figures()
        steps = sum(f1[i]["steps"] - f0[i]["steps"] for i in f1)
        pushes = sum(f1[i]["pushes"] - f0[i]["pushes"] for i in f1)
        fetches = sum(f1[i]["fetches"] - f0[i]["fetches"] for i in f1)
        assert steps >= 300
        assert abs(pushes - steps / 5) <= 4 and abs(fetches - steps / 5) <= 4
        with pytest.raises(ValueError, match="n_push must be"):
            d.set(n_push=0)
        with pytest.raises(ValueError, match="cannot change while training"):
            d.set(batch_size=64)
        assert d.config.n_push == 5
        before = d.current_params()
        d.set(shards=3)  # re-sharded while running: same parameters, new shards, rates kept
        assert len(d.server.shards) == 3 and d.current_params().tobytes() == before.tobytes()
        d.fit(steps=20)
        assert all(f["n_push"] == 5 for f in d.book.figures().values() if f["state"] == "paused")


def test_add_and_remove_replicas_while_running(digits, local_cluster):
    with DownpourSGD("linear", digits, replicas=2, shards=1, optimizer="sgd", lr=0.02,
                     client=local_cluster.client) as d:
        d.fit(seconds=0.5)
        assert d.add_replicas(1) == [2]
        before = _pushes(d)
        d.fit(seconds=1.0)
        after = _pushes(d)
        assert all(after[i] > before.get(i, 0) for i in (0, 1, 2))
        assert d.remove_replicas(2) == [1, 2]
        before = _pushes(d)
        d.fit(seconds=0.5)
        after = _pushes(d)
        assert after[0] > before[0] and after[1] == before[1] and after[2] == before[2]
        assert d.config.replicas == 1
        with pytest.raises(ValueError, match="one replica must remain"):
            d.remove_replicas(1)
        states = {i: f["state"] for i, f in d.book.figures().items()}
        assert states[1] == states[2] == "removed"


def test_warm_start_runs_one_replica_first(digits, local_cluster):
    with DownpourSGD("linear", digits, replicas=3, shards=1, warm_start_steps=80, optimizer="sgd", lr=0.02,
                     client=local_cluster.client) as d:
        d.fit(steps=60)
        f = d.book.figures()
        assert list(f) == [0] and f[0]["steps"] == 60  # the others wait for warm start
        d.fit(seconds=2.0)
        f = d.book.figures()
        assert sorted(f) == [0, 1, 2] and all(f[i]["pushes"] > 0 for i in (1, 2))
        assert f[0]["steps"] > f[1]["steps"]


def test_a_change_in_progress_refuses_another(digits, local_cluster):
    with DownpourSGD("linear", digits, replicas=1, shards=1, client=local_cluster.client) as d:
        d.start()
        d._change.acquire()
        try:
            with pytest.raises(ChangeInProgress):
                d.set(lr=0.01)
        finally:
            d._change.release()
        assert d.config.lr == 0.05
        d.set(lr=0.01)
        assert d.config.lr == 0.01 and all(s["lr"] == 0.01 for s in d.server.stats())


def test_stop_leaves_no_tasks_or_actors(digits, local_cluster):
    d = DownpourSGD("linear", digits, replicas=2, shards=2, client=local_cluster.client)
    d.fit(seconds=0.5)
    tag, mine = d.cluster.tag, d.tag
    d.stop()
    d.stop()  # idempotent

    def leftovers(dask_worker, tag=tag, mine=mine):
        keys = [str(k) for k in list(dask_worker.state.actors) + list(dask_worker.state.tasks)]
        return [k for k in keys if tag in k or mine in k]

    deadline = time.time() + 10
    while True:
        left = local_cluster.client.run(leftovers)
        if not any(left.values()) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert not any(left.values()), left
    assert local_cluster.client.status == "running"  # a borrowed client stays open
    assert validate_report(d.report()) == []  # figures survive the stop


def test_a_lost_replica_ends_alone(digits):
    with Cluster(n_workers=3) as cluster:
        w = cluster.workers()
        with DownpourSGD("linear", digits, replicas=2, shards=1, optimizer="sgd", lr=0.02,
                         client=cluster.client, shard_workers=[w[0]], replica_workers=[w[1], w[2]]) as d:
            d.fit(seconds=0.5)
            victim = d.book.worker_of(1)
            pid = cluster.client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            before = d.book.figures()[0]["steps"]
            d.fit(seconds=4)
            f = d.book.figures()
            assert f[1]["state"] == "lost" and f[1]["failures"] == 1 and victim in f[1]["error"]
            assert f[0]["state"] == "paused" and f[0]["steps"] > before
            report = d.report()
        assert [r["failures"] for r in report["replicas"]] == [0, 1]


def test_bad_settings_are_refused_before_anything_starts(digits):
    for bad in (dict(replicas=0), dict(n_fetch=0), dict(lr=-1), dict(shards=10**6), dict(optimizer="adam")):
        with pytest.raises(ValueError):
            DownpourSGD("linear", digits, **bad)
