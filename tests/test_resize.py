"""``set(replicas=n)`` means the same on every runtime: one rule (``dbkit.downpour.resize``) decides which
replicas start, wait for the warm start, or leave, for the Downpour job's fleet and for the simulator."""

import time

import pytest

import dbkit
from dbkit import data
from dbkit.downpour.resize import Resize, resize
from dbkit.runtime import InProcessCluster
from dbkit.sim import Cluster


def test_new_replicas_take_new_numbers_and_the_most_recent_leave_first():
    assert resize([0, 1], [], [0, 1], 4) == Resize(start=(2, 3))
    assert resize([0, 1], [], [0, 1, 2, 5], 3) == Resize(start=(6,))  # an ended replica's number is not reused
    assert resize([0, 1, 2, 3], [], range(4), 2) == Resize(stop=(3, 2))
    assert resize([0, 1], [], [0, 1], 2) == Resize()


def test_during_the_warm_start_new_replicas_wait_and_waiting_ones_leave_before_any_that_trains():
    assert resize([0], [1, 2], [0, 1, 2], 5) == Resize(hold=(3, 4))
    assert resize([0], [1, 2, 3], [0, 1, 2, 3], 2) == Resize(drop=(3, 2))
    assert resize([0, 5], [3], [0, 3, 5], 1) == Resize(drop=(3,), stop=(5,))


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_a_number_of_replicas_below_one_or_not_whole_is_refused(n):
    with pytest.raises(ValueError, match="replicas must be a whole number"):
        resize([0], [], [0], n)


def _replicas_after_the_same_moves(job):
    """Warm start on: two replicas asked for while replica 0 trains alone, one of them taken back; then
    the warm start ends. Returns the replicas started before it ended, and all those started."""
    with job:
        job.fit(steps=10, progress=False)
        job.set(replicas=4)  # replica 1 waits for the warm start; 2 and 3 are to wait with it
        job.set(replicas=3)  # 3 leaves before it ever started
        before = sorted(r.replica for r in job.replicas())
        job.fit(steps=120, progress=False)  # replica 0 passes the warm start's 30 steps: the others start
        deadline = time.monotonic() + 30
        while len(job.replicas()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        return before, sorted(r.replica for r in job.replicas())


def test_in_process_and_simulated_jobs_start_and_drop_the_same_replicas():
    digits = data.load("digits")
    settings = dict(replicas=2, shards=1, warm_start_steps=30, optimizer="sgd", lr=0.02)
    with InProcessCluster(workers=2) as machines:
        real = _replicas_after_the_same_moves(dbkit.DownpourSGD("linear", digits, cluster=machines, **settings))
    simulated = _replicas_after_the_same_moves(dbkit.DownpourSGD("linear", digits, cluster=Cluster(), **settings))
    assert real == simulated == ([0], [0, 1, 2])  # 2 waited with 1; 3 never started anywhere


@pytest.mark.parametrize("steps,weights", [(30, [2.0, 1.0]), (7, [1.0, 1.0, 1.0]), (1000, [3.3, 0.0, 1.1, 5.6]),
                                           (5, [0.0, 0.0]), (0, [1.0, 2.0])])
def test_a_budget_is_split_in_whole_shares_in_proportion_to_the_weights(steps, weights):
    from dbkit.downpour.shares import split

    shares = split(steps, weights)
    assert sum(shares) == steps and all(s >= 0 for s in shares)
    total = sum(weights)
    exact = [steps * w / total if total else steps / len(weights) for w in weights]
    assert all(abs(s - x) < 1 for s, x in zip(shares, exact))  # each within a step of its exact share
