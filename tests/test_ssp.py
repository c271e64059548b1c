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

from .after_rig import NET, batches, replica

LR = 0.05


def _replica(cls, i: int, server, **knobs):
    return replica(cls, i, server, LR, **knobs)


def test_ssp_at_zero_steps_replicas_in_turn_each_on_everything_the_others_pushed():
    # Driven in turn (A, B, C, A, ...), s = 0 lets each go only once all have finished the step before; each
    # computes on the parameters after every push before it: the sequence below, worked by hand.
    start = NET.init_params(0)
    server = local_shards(start, 2, "sgd", LR)
    replicas = [_replica(SSPReplica, i, server, max_staleness=0) for i in range(3)]
    p, draws = start.copy(), [batches(i) for i in range(3)]
    for _ in range(4):
        for i, r in enumerate(replicas):
            r.step()
            xb, yb = next(draws[i])
            _, g = NET.loss_and_grad(p, xb, yb)
            p -= np.float32(LR) * g
    assert np.array_equal(server.fetch(), p)
    assert server.shards[0].clocks.widest <= 1  # never more than one step between fastest and slowest


def test_ssp_at_zero_makes_a_replica_that_ran_ahead_wait_until_the_others_catch_up():
    server = local_shards(NET.init_params(0), 2, "sgd", LR)
    a, b = (_replica(SSPReplica, i, server, max_staleness=0) for i in range(2))
    a.step()
    b.step()
    a.step()  # a finished 2 steps, b 1: a's next step must wait for b
    went = threading.Event()
    t = threading.Thread(target=lambda: (a.step(), went.set()), daemon=True)
    t.start()
    assert not went.wait(0.5) and a.counters.steps == 2 and a.waits > 0  # waiting (and looking again)
    b.step()
    assert went.wait(10) and a.counters.steps == 3
    t.join(10)


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
