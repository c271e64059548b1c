"""Downpour SGD: the replica and its loop in process, then on a real LocalCluster: exactness,
accuracy, steering, divergence, staleness, failures, cleanup."""

import os
import signal
import time

import numpy as np
import pytest

import dbkit
from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.downpour import DownpourReplica, run_replica_loop
from dbkit.ps import Histogram, local_shards
from dbkit.runtime.dask import Cluster
from dbkit.sync_sgd import SGDTrainer
from dbkit.telemetry import Divergence, ReplicaEvent, Sample, validate_report
from dbkit.training import ReplicaSettings

from .conftest import leftovers


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def _pushes(job):
    return {r.replica: r.pushes for r in job.replicas()}


# ---- in process ------------------------------------------------------------------------------
class NoWaiting:
    """A clock whose waits return at once (a scripted loop's settings change on every read)."""

    poll, publish_every = 0.005, 0.01

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        pass

    def wait(self, seconds: float) -> None:
        pass


def test_replica_in_process_equals_sync_sgd(digits):
    net = nn.build("mlp", 64, 10, l2=1e-4)
    base = SGDTrainer(net, digits, lr=0.05)
    server = local_shards(net.init_params(0), 2, "sgd", 0.05)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 32, seed=0)
    for _ in range(40):
        base.step()
        replica.step()
    assert server.fetch().tobytes() == base.params.tobytes()


def test_replica_accumulates_and_pushes_every_n_push(digits):
    net = nn.build("linear", 64, 10)
    server = local_shards(net.init_params(0), 1, "sgd", 0.01)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_fetch=3, n_push=4, lr=0.01)
    for _ in range(12):
        replica.step()
    # fetches before steps 1, 4, 7, 10 and, combined with the push after step 12, for step 13
    f = replica.figures()
    assert (f.pushes, f.fetches) == (3, 5)
    assert server.shards[0].version == 3
    # each push sums 4 x 16 examples; pushes 2 and 3 began on parameters fetched before the previous
    # push landed (fetches before steps 4 and 7), so its 64 examples count too: ages 64, 128, 128
    assert f.age == Histogram((64, 128), (1, 2))
    replica.configure(3, 1, 0.01)
    replica.step()
    assert (replica.figures().pushes, replica.figures().fetches) == (4, 5)
    with pytest.raises(ValueError, match="n_fetch"):
        replica.configure(0, 1, 0.01)
    assert replica.schedule.n_fetch == 3


def test_the_replica_loop_pauses_at_its_cap_follows_settings_and_stops(digits):
    net = nn.build("linear", 64, 10)
    server = local_shards(net.init_params(0), 2, "sgd", 0.01)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_push=4)
    script = iter([ReplicaSettings(n_push=4, max_steps=6)] * 40 + [ReplicaSettings(n_push=2, max_steps=10, epoch=1)]
                  * 40 + [ReplicaSettings(stop=True, epoch=2)] * 3)
    seen = []
    final = run_replica_loop(replica, lambda: next(script), seen.append, clock=NoWaiting())
    assert final.state == "stopped" and final.steps == 10 and final.n_push == 2
    paused = [f for f in seen if f.state == "paused"]
    assert paused[0].steps == 6 and paused[0].pushes == 2  # paused at its cap, after pushing what it had
    assert paused[-1].steps == 10 and paused[-1].epoch == 1  # echoes the settings it acted on
    assert server.shards[0].version == final.pushes == 4  # 6 steps: push at 4 and at the pause; then 2 more


def test_the_replica_loop_ends_a_diverged_or_failing_replica_alone(digits):
    net = nn.build("mlp", 64, 10)
    server = local_shards(np.full(net.size, 1e30, np.float32), 1, "sgd", 0.01)  # beyond repair
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, max_nonfinite=5)
    final = run_replica_loop(replica, lambda: ReplicaSettings(), lambda f: None)
    assert final.state == "diverged" and final.nonfinite == 5 and "non-finite" in final.error

    class Broken(DownpourReplica):
        def step(self):
            raise OSError("disk on fire")

    broken = Broken(1, net, digits.X_train, digits.y_train, local_shards(net.init_params(0), 1), 16)
    final = run_replica_loop(broken, lambda: ReplicaSettings(), lambda f: None)
    assert final.state == "failed" and final.failures == 1 and "disk on fire" in final.error


# ---- on a LocalCluster -----------------------------------------------------------------------
@pytest.mark.cluster
@pytest.mark.parametrize("transport", ["socket", "actor"])
def test_one_replica_one_shard_reproduces_sync_sgd_exactly(digits, local_cluster, transport):
    # The blocking client: an overlapped one computes on parameters one exchange old (the paper's client
    # does too), so only the blocking one is sync SGD. Over the shard wire and over actor calls alike.
    cfg = RunConfig.make(algorithm="downpour", steps=60, lr=0.05, optimizer="sgd", replicas=1, shards=1,
                         overlap=False, transport=transport)
    net = nn.build("mlp", 64, 10, l2=cfg.l2)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    with dbkit.DownpourSGD(net, digits, config=cfg, client=local_cluster.client) as d:
        d.fit(steps=60, progress=False)
        params = d.parameters()
        assert d.snapshot().step == 60
    assert params.tobytes() == base.params.tobytes()


@pytest.mark.cluster
def test_three_replicas_adagrad_on_digits(digits, where):
    with dbkit.DownpourSGD("mlp", digits, replicas=3, shards=2, optimizer="adagrad", lr=0.05,
                           **where, eval_every=200) as d:
        d.fit(steps=1200, progress=False)
    report = d.report()
    assert validate_report(report) == []
    assert report["final"]["test_accuracy"] >= 0.93
    assert len(report["replicas"]) == 3 and all(r["pushes"] > 0 for r in report["replicas"])
    assert max(s["staleness"]["max"] for s in report["shards"]) > 0  # really asynchronous
    assert sum(s["updates"] for s in report["shards"]) == 2 * sum(r["pushes"] for r in report["replicas"])
    assert len(report["history"]) >= 2 and report["bytes"]["pushed"] > 0


@pytest.mark.cluster
def test_set_changes_fetch_and_push_rates_while_running(digits, where):
    with dbkit.DownpourSGD("linear", digits, replicas=2, shards=2, n_fetch=1, n_push=1, optimizer="sgd", lr=0.02,
                           **where) as d:
        d.fit(steps=100, progress=False)
        f0 = {r.replica: r for r in d.replicas()}
        assert all(f.pushes == f.steps for f in f0.values())
        d.set(n_fetch=5, n_push=5)
        assert all(r.n_push == 5 for r in d.replicas())  # applied on the replicas, not just asked
        d.fit(steps=300, progress=False)
        f1 = {r.replica: r for r in d.replicas()}
        steps = sum(f1[i].steps - f0[i].steps for i in f1)
        pushes = sum(f1[i].pushes - f0[i].pushes for i in f1)
        fetches = sum(f1[i].fetches - f0[i].fetches for i in f1)
        assert steps >= 300
        assert abs(pushes - steps / 5) <= 4 and abs(fetches - steps / 5) <= 4
        with pytest.raises(ValueError, match="n_push must be"):
            d.set(n_push=0)
        with pytest.raises(ValueError, match="cannot change while training"):
            d.set(batch_size=64)
        assert d.config.downpour.n_push == 5
        before = d.parameters()
        d.set(shards=3)  # re-sharded while running: same parameters, new shards, rates kept
        assert len(d.shards()) == 3 and d.parameters().tobytes() == before.tobytes()
        d.fit(steps=20, progress=False)
        assert all(r.n_push == 5 for r in d.replicas() if r.state == "paused")


@pytest.mark.cluster
def test_add_and_remove_replicas_while_running(digits, where):
    with dbkit.DownpourSGD("linear", digits, replicas=2, shards=1, optimizer="sgd", lr=0.02,
                           **where) as d:
        d.fit(seconds=0.5, progress=False)
        assert d.add_replicas(1) == [2]
        before = _pushes(d)
        d.fit(seconds=1.0, progress=False)
        after = _pushes(d)
        assert all(after[i] > before.get(i, 0) for i in (0, 1, 2))
        assert d.remove_replicas(2) == [1, 2]
        before = _pushes(d)
        d.fit(seconds=0.5, progress=False)
        after = _pushes(d)
        assert after[0] > before[0] and after[1] == before[1] and after[2] == before[2]
        assert d.config.replicas == 1
        with pytest.raises(ValueError, match="one replica must remain"):
            d.remove_replicas(1)
        states = {r.replica: r.state for r in d.replicas()}
        assert states[1] == states[2] == "removed"
        said = [(e.replica, e.what) for e in d.events.of(ReplicaEvent) if e.what in ("added", "removed")]
        assert said == [(2, "added"), (1, "removed"), (2, "removed")]


@pytest.mark.cluster
def test_warm_start_runs_one_replica_first(digits, where):
    with dbkit.DownpourSGD("linear", digits, replicas=3, shards=1, warm_start_steps=80, optimizer="sgd", lr=0.02,
                           **where) as d:
        d.fit(steps=60, progress=False)
        f = d.replicas()
        assert [r.replica for r in f] == [0] and f[0].steps == 60  # the others wait for warm start
        d.fit(seconds=2.0, progress=False)
        f = {r.replica: r for r in d.replicas()}
        assert sorted(f) == [0, 1, 2] and all(f[i].pushes > 0 for i in (1, 2))
        assert f[0].steps > f[1].steps


@pytest.mark.cluster
def test_a_diverging_run_ends_as_diverged_and_adagrad_at_the_same_rate_does_not(digits, where):
    """The issue's example: 6 replicas of fixed-rate SGD at lr = 1 once spun forever."""
    with dbkit.DownpourSGD("mlp", digits, replicas=6, optimizer="sgd", lr=1.0, **where) as d:
        d.fit(steps=1500, progress=False)  # returns on its own: no test timeout needed
        assert d.state == "diverged" and d.snapshot().step < 1500
        assert all(r.state == "diverged" for r in d.replicas())
        [event] = d.events.of(Divergence)
        assert "Adagrad" in event.message and "lr=1.0" in event.message
    assert d.report()["state"] == "diverged"
    with dbkit.DownpourSGD("mlp", digits, replicas=6, optimizer="adagrad", lr=1.0, **where) as d:
        d.fit(steps=1500, progress=False)
        assert d.state == "paused" and d.snapshot().step >= 1500 and not d.events.of(Divergence)
        assert d.history[-1]["test_accuracy"] > 0.8


@pytest.mark.cluster
def test_staleness_in_examples_grows_with_n_push_in_the_event_stream(digits, where):
    with dbkit.DownpourSGD("linear", digits, replicas=2, shards=1, n_fetch=1, n_push=1, optimizer="adagrad",
                           **where) as d:
        d.fit(seconds=1.5, progress=False)
        low = d.events.last(Sample).seq
        d.set(n_push=16)
        d.fit(seconds=1.5, progress=False)

    def mean_age(samples):
        counts = {}
        for s in samples:
            for v, c in zip(s.staleness_examples.values, s.staleness_examples.counts):
                counts[v] = counts.get(v, 0) + c
        return sum(v * c for v, c in counts.items()) / sum(counts.values())

    samples = d.events.of(Sample)
    before = [s for s in samples if s.seq <= low and s.staleness_examples.count]
    after = [s for s in samples if s.seq > low + 2 and s.staleness_examples.count]
    assert before and after
    assert mean_age(after) > 4 * mean_age(before)  # 16 x 32 examples per push against 1 x 32


@pytest.mark.cluster
def test_stop_leaves_no_tasks_or_actors(digits, local_cluster):
    d = dbkit.DownpourSGD("linear", digits, replicas=2, shards=2, client=local_cluster.client)
    d.fit(seconds=0.5, progress=False)
    d.stop()
    d.stop()  # idempotent
    assert not leftovers(local_cluster, d.tag)
    assert not leftovers(local_cluster, "dbkit-shard")  # no job's shards are left: each job let its go
    assert local_cluster.client.status == "running"  # a borrowed client stays open
    assert validate_report(d.report()) == []  # figures survive the stop


@pytest.mark.cluster
def test_a_lost_replica_ends_alone(digits):
    with Cluster(n_workers=3) as cluster:
        w = cluster.workers()
        with dbkit.DownpourSGD("linear", digits, replicas=2, shards=1, optimizer="sgd", lr=0.02,
                               client=cluster.client, shard_workers=[w[0]], replica_workers=[w[1], w[2]],
                               restart_replicas=False) as d:  # replacement: tests/test_recovery.py
            d.fit(seconds=0.5, progress=False)
            victim = d.replicas()[1].worker
            pid = cluster.client.run(os.getpid, workers=[victim])[victim]
            os.kill(pid, signal.SIGKILL)
            before = d.replicas()[0].steps
            d.fit(seconds=4, progress=False)
            f = d.replicas()
            assert f[1].state == "lost" and f[1].failures == 1 and victim in f[1].error
            assert f[0].state == "paused" and f[0].steps > before
            assert any(e.what == "lost" and e.replica == 1 for e in d.events.of(ReplicaEvent))
            report = d.report()
        assert [r["failures"] for r in report["replicas"]] == [0, 1]


def test_bad_settings_are_refused_before_anything_starts(digits):
    for bad in (dict(replicas=0), dict(n_fetch=0), dict(lr=-1), dict(shards=10**6), dict(optimizer="adam")):
        with pytest.raises(ValueError):
            dbkit.DownpourSGD("linear", digits, **bad)
    with pytest.raises(TypeError, match="data must be"):
        dbkit.DownpourSGD("linear", digits.X_train)
