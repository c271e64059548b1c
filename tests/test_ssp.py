"""Issue #24: Stale Synchronous Parallel (Ho et al. 2013) as a registered replica loop: its bound on how far
a replica runs ahead, against a sequence worked by hand and against Downpour."""

import threading

import numpy as np
import pytest

import dbkit
from dbkit.after.ssp import SSPReplica
from dbkit.config import RunConfig
from dbkit.downpour import DownpourReplica
from dbkit.ps import local_shards
from dbkit.runtime import InProcessCluster

from .after_rig import NET, PushOrder, batches, clocks, replica

LR = 0.05


def _replica(cls, i: int, server, **knobs):
    return replica(cls, i, server, LR, **knobs)


def test_ssp_at_zero_is_synchronous_sgd_bit_for_bit():
    # Three replicas on threads, s = 0: every step c computes on exactly the parameters after all of step
    # c - 1 (Ho et al. 2013, Sec. 2: a read at step c sees steps [0, c-1] and nothing of the window
    # [c, c-1], empty): synchronous SGD with the same batches, its gradients applied in the order they came.
    start, rounds = NET.init_params(0), 5
    server = local_shards(start, 2, "sgd", LR)
    order = PushOrder()
    replicas = [replica(SSPReplica, i, server, LR, own=order.client(server, f"replica{i}"), max_staleness=0)
                for i in range(3)]
    for r in replicas:
        r.join()  # all counted from the start, as a job's replicas are from their first step on

    def run(r):
        for _ in range(rounds):
            r.step()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r.counters.steps == rounds for r in replicas)
    p, draws = start.copy(), [batches(i) for i in range(3)]
    for c in range(rounds):
        came = order.names[3 * c : 3 * c + 3]
        assert sorted(came) == ["replica0", "replica1", "replica2"]  # no push of step c + 1 before all of c
        grads = {}
        for i in range(3):
            xb, yb = next(draws[i])
            grads[f"replica{i}"] = NET.loss_and_grad(p, xb, yb)[1]  # all at the parameters after step c - 1
        for name in came:
            p -= np.float32(LR) * grads[name]
    assert np.array_equal(server.fetch(), p)
    assert clocks(server).widest <= 1  # never more than one step between fastest and slowest


def test_ssp_holds_a_push_until_no_replica_may_still_read_for_a_step_too_early_to_see_it():
    # s = 1: a replica may start step 1 while b has not started step 0, but its step 1 must not reach b's
    # read for step 0 (the window [c - s, c + s - 1] = [-1, 0]): it waits until b has read. Its step 2 then
    # waits for b to finish step 0 and read for step 1.
    start = NET.init_params(0)
    server = local_shards(start, 2, "sgd", LR)
    a, b = (_replica(SSPReplica, i, server, max_staleness=1) for i in range(2))
    a.join()
    b.join()
    ran = threading.Thread(target=lambda: [a.step() for _ in range(3)], daemon=True)
    ran.start()
    ran.join(0.5)
    assert ran.is_alive() and a.counters.steps == 2 and a.waits > 0  # step 1 computed, its push held
    xa, ya = next(batches(0))
    expected = start - np.float32(LR) * NET.loss_and_grad(start, xa, ya)[1]
    assert np.array_equal(server.fetch(), expected)  # only a's step 0 is on the shards
    b.step()  # b reads for step 0 (a's step 0 only), which lets a's step 1 go
    ran.join(0.5)
    assert ran.is_alive() and a.counters.steps == 3  # a's step 2 is held until b reads for step 1
    b.step()
    ran.join(10)
    assert not ran.is_alive() and a.counters.steps == 3


def test_ssp_unbounded_is_downpour_bit_for_bit():
    results = []
    for cls, knobs in ((SSPReplica, {"max_staleness": None}), (DownpourReplica, {})):
        server = local_shards(NET.init_params(1), 2, "adagrad", LR)
        replicas = [_replica(cls, i, server, **knobs) for i in range(2)]
        for _ in range(6):
            replicas[0].step()
            replicas[0].step()
            replicas[1].step()  # replica 1 falls behind: unbounded, nobody waits
        results.append(server.fetch())
    assert np.array_equal(*results)


def test_a_paused_replica_leaves_and_holds_nobody_back():
    server = local_shards(NET.init_params(0), 2, "sgd", LR)
    a, b = (_replica(SSPReplica, i, server, max_staleness=1) for i in range(2))
    a.step()
    b.step()
    b.flush()  # b pauses: it leaves
    done = threading.Event()

    def five_steps():
        for _ in range(5):
            a.step()  # would wait for b after one step ahead, were b still counted
        done.set()

    threading.Thread(target=five_steps, daemon=True).start()
    assert done.wait(20), "a waited for a replica that had left"
    assert a.counters.steps == 6 and a.waits == 0


def test_ssp_bounds_how_far_fast_replicas_run_ahead_of_a_straggler_where_downpour_does_not():
    steps = {}
    for s in (1, 1_000_000):  # a bound no run here reaches: Downpour
        with InProcessCluster(2) as m, dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=3, replica="ssp",
                                                         max_staleness=s, optimizer="adagrad", lr=0.05,
                                                         slow_replicas={0: 4.0}) as job:
            job.fit(steps=300, progress=False)
        by_replica = {r["replica"]: r["steps"] for r in job.report()["replicas"]}
        steps[s] = by_replica
        assert job.report()["config"]["replica_loop"] == {"name": "ssp", "settings": {"max_staleness": s}}
    bounded, free = steps[1], steps[1_000_000]
    assert max(bounded.values()) - bounded[0] <= 1 + 2  # s, and a step each side of the last looks
    assert max(free.values()) > 2 * free[0]  # Downpour: the fast replicas run far ahead of the straggler


def test_ssp_settings_are_checked():
    c = RunConfig.make(algorithm="downpour", replica="ssp", max_staleness=0)
    assert c.replica_settings() == {"max_staleness": 0}
    with pytest.raises(ValueError, match="max_staleness must be a whole number in \\[0, 1000000\\], got -1"):
        c.replace(max_staleness=-1)
