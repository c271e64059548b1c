"""The levers a learner pulls on a running Downpour job (issue #10's panel drives exactly these):
the update rule, a straggler, losing a replica, warm start before the start, and a new run."""

import time

import numpy as np
import pytest

import dbkit
from dbkit import data, nn
from dbkit.downpour import DownpourReplica, run_replica_loop
from dbkit.ps import local_shards, make_rule
from dbkit.telemetry import Change, ErrorEvent, ReplicaEvent
from dbkit.training import ReplicaSettings


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


# ---- in process ------------------------------------------------------------------------------
class Recording:
    """A clock that keeps what the loop asks it to sleep, and returns at once."""

    poll, publish_every = 0.005, 0.01

    def __init__(self) -> None:
        self.slept: list[float] = []

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def wait(self, seconds: float) -> None:
        pass


def test_a_slow_replica_sleeps_its_factor_minus_one_times_each_step(digits):
    net = nn.build("linear", 64, 10)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, local_shards(net.init_params(0), 1), 16)
    script = iter([ReplicaSettings(slow=5.0, max_steps=20)] * 21 + [ReplicaSettings(stop=True)])
    clock = Recording()
    final = run_replica_loop(replica, lambda: next(script), lambda f: None, clock=clock)
    assert final.steps == 20 and final.slow == 5.0
    assert len(clock.slept) == 20 and all(s > 0 for s in clock.slept)  # one sleep per step: 4 x the step's own time
    replica = DownpourReplica(1, net, digits.X_train, digits.y_train, local_shards(net.init_params(0), 1), 16)
    script = iter([ReplicaSettings(max_steps=20)] * 21 + [ReplicaSettings(stop=True)])
    clock = Recording()
    run_replica_loop(replica, lambda: next(script), lambda f: None, clock=clock)
    assert clock.slept == []  # factor 1: never sleeps


def test_a_crashed_replica_is_lost_and_never_pushes_what_it_accumulated(digits):
    net = nn.build("linear", 64, 10)
    server = local_shards(net.init_params(0), 1, "sgd", 0.01)
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_push=8)
    script = iter([ReplicaSettings(n_push=8)] * 13 + [ReplicaSettings(n_push=8, crash=True, epoch=1)] * 2)
    final = run_replica_loop(replica, lambda: next(script), lambda f: None, clock=Recording())
    assert final.state == "lost" and final.failures == 1 and "killed" in final.error
    assert final.steps == 12 and final.pushes == 1 and server.shards[0].version == 1  # steps 9-12 never pushed
    assert final.epoch == 1


def test_a_shard_switches_its_update_rule_with_fresh_accumulators():
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=50).astype(np.float32)
    g1, g2 = rng.normal(size=(2, 50)).astype(np.float32)
    server = local_shards(p0, 2, "sgd", 0.1)
    server.push(g1)
    server.set_optimizer("adagrad")
    server.push(g2)
    expected = p0.copy()
    make_rule("sgd", 0.1).apply(expected, g1, None)
    rule = make_rule("adagrad", 0.1)
    rule.apply(expected, g2, rule.new_state(50))  # accumulators start afresh at the switch
    np.testing.assert_array_equal(server.fetch(), expected)
    assert [s.rule.optimizer for s in server.shards] == ["adagrad", "adagrad"]
    server.set_optimizer("sgd")
    assert all(s.opt_state is None for s in server.shards)


def test_sync_sgd_changes_its_update_rule_while_it_trains(digits):
    net = nn.build("linear", 64, 10)
    job = dbkit.SyncSGD(net, digits, lr=0.05, optimizer="sgd", batch_size=32)
    job.fit(steps=30, progress=False)
    job.set(optimizer="adagrad")
    job.fit(steps=30, progress=False)
    job.stop()
    # independent reference: the same batches through the two rules by hand
    from dbkit.data import MiniBatches

    params, batches = net.init_params(0), MiniBatches(digits.X_train, digits.y_train, 32, seed=0)
    sgd, ada = make_rule("sgd", 0.05), make_rule("adagrad", 0.05)
    acc = ada.new_state(net.size)
    for i in range(60):
        X, y = next(batches)
        _, g = net.loss_and_grad(params, X, y)
        (sgd.apply(params, g, None) if i < 30 else ada.apply(params, g, acc))
    np.testing.assert_array_equal(job.parameters(), params)
    assert [(c.setting, c.old, c.new) for c in job.events.of(Change)][-1] == ("optimizer", "sgd", "adagrad")


def test_warm_start_is_set_before_the_start_only(digits):
    job = dbkit.SyncSGD("linear", digits)
    with pytest.raises(ValueError, match="cannot change while training"):
        job.set(warm_start_steps=10)  # sync SGD has no warm start at all
    run = dbkit.DownpourSGD("linear", digits, replicas=2)
    run.set(warm_start_steps=40)
    assert run.config.downpour.warm_start_steps == 40 and run.state == "created"
    again = run.new_run(n_push=4, optimizer="sgd")
    assert isinstance(again, dbkit.DownpourSGD) and again.state == "created" and again is not run
    assert again.network is run.network and again.data is run.data
    assert (again.config.downpour.n_push, again.config.optimizer, again.config.downpour.warm_start_steps) == (
        4, "sgd", 40)
    with pytest.raises(ValueError, match="slow_replicas names replica 5"):
        run.set(slow_replicas={5: 2.0})


# ---- on a LocalCluster -----------------------------------------------------------------------
@pytest.mark.cluster
def test_optimizer_straggler_and_a_lost_replica_on_a_running_job(digits, local_cluster):
    with dbkit.DownpourSGD("linear", digits, replicas=3, shards=2, optimizer="sgd", lr=0.02,
                           client=local_cluster.client) as d:
        assert d.snapshot().dashboard is None  # not started
        d.fit(steps=60, progress=False)
        assert d.snapshot().dashboard.startswith("http")  # bokeh is a dependency: the scheduler serves it
        with pytest.raises(ValueError, match="shapes how a job starts"):
            d.set(warm_start_steps=10)

        d.set(optimizer="adagrad")
        assert {s.optimizer for s in d.shards()} == {"adagrad"}
        params, acc = d.parameter_state()
        assert acc is not None and np.all(acc >= 0.1)

        d.set(slow_replicas={0: 10.0})
        assert [r.slow for r in d.replicas()] == [10.0, 1.0, 1.0]
        before = {r.replica: r.steps for r in d.replicas()}
        d.fit(seconds=2.0, progress=False)
        done = {r.replica: r.steps - before[r.replica] for r in d.replicas()}
        assert done[0] < 0.5 * min(done[1], done[2])  # the straggler falls behind; nobody waits for it

        d.set(slow_replicas={})
        assert d.lose_replica() == 2
        before = {r.replica: r.steps for r in d.replicas()}
        d.fit(seconds=1.0, progress=False)
        f = {r.replica: r for r in d.replicas()}
        assert f[2].state == "lost" and f[2].failures == 1 and "killed" in f[2].error
        assert f[2].steps == before[2] and f[0].steps > before[0] and f[1].steps > before[1]
        assert any(e.replica == 2 and e.what == "lost" for e in d.events.of(ReplicaEvent))
        assert d.lose_replica(0) == 0
        with pytest.raises(ValueError, match="other than the last one"):
            d.lose_replica()
        d.set(replicas=3)  # replicas come back on demand: two new ones
        assert sorted(r.replica for r in d.replicas() if r.live) == [1, 3, 4]
        assert d.state == "paused" and not d.events.of(ErrorEvent)
