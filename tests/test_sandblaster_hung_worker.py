"""Sandblaster with a hung (SIGSTOPped) worker ends where an undisturbed run does (issue #48, 8).

A sweep found 1 run in 4 failing: the worker holding a shard and a replica was stopped, dropped as hung
after the heartbeat timeout, but the coordinator's flush went on waiting on the stopped shard for its 60 s
deadline, then counted every replica lost ("its work unit was cancelled") and the run failed. Here the stop
is timed to land at each of the three places the coordinator can be waiting on a shard: a batch's units,
the batch's flush, and an L-BFGS vector operation between batches. Each run must restore from the
checkpoint while the machine is still stopped, count the stopped worker's replica lost, go on after the
machine wakes, and end at the undisturbed run's loss (the 1e-6 relative tolerance the Sandblaster tests
hold against scipy: L-BFGS is deterministic given its batch gradients).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

import dbkit
from dbkit.ps import ShardedParameters
from dbkit.sandblaster.batch import UnitBatch
from dbkit.telemetry import ErrorEvent, ShardLost, validate_report

pytestmark = pytest.mark.cluster

ITERATIONS = 10
STOP_AT = 4  # iterations done before the stop
HEARTBEAT = 3.0  # seconds a shard may be silent before its worker is dropped (10 by default; shorter for CI)


def _job(address: str, w: list[str], folder: str) -> dbkit.SandblasterLBFGS:
    """Shard 0 and replica 2 share worker ``w[0]``: a stop there loses both. The stopped worker's replica is
    the last the flush looks at, so the flush waits on the live replicas' pushes to the stopped shard first
    (the sweep's failure); ``push_every`` above a batch's units leaves every push to the flush."""
    return dbkit.SandblasterLBFGS("linear", "digits", scheduler=address, replicas=3, shards=2, iterations=ITERATIONS,
                                  gtol=0, ftol=0, push_every=10**4, shard_workers=[w[0], w[1]],
                                  replica_workers=[w[1], w[2], w[0]],
                                  checkpoint_dir=folder, checkpoint_every=0.01, heartbeat_timeout=HEARTBEAT)


def _final_loss(job: dbkit.SandblasterLBFGS) -> tuple[float, dict]:
    job.fit(steps=ITERATIONS, progress=False)
    assert job.state == "paused", job.events.last(ErrorEvent)
    report = job.report()
    assert validate_report(report) == [] and report["sandblaster"]["iterations"] == ITERATIONS
    return report["sandblaster"]["rows"][-1]["loss"], report


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> float:
    from .conftest import real_dask

    with real_dask(3) as cluster:
        from distributed import Client

        with Client(cluster.address, timeout=10) as c:
            w = sorted(c.nthreads())
        with _job(cluster.address, w, str(tmp_path_factory.mktemp("undisturbed"))) as job:
            loss, report = _final_loss(job)
    assert report["faults"]["shards_lost"] == 0
    return loss


#: where the coordinator is when the machine stops: the class and method it has just entered
MOMENTS = {"units": (UnitBatch, "_run_units"), "flush": (UnitBatch, "_flush"), "vector": (ShardedParameters, "dot")}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_sandblaster_with_a_hung_worker_ends_at_the_undisturbed_loss(moment, undisturbed, dask_processes, tmp_path,
                                                                   monkeypatch):
    from distributed import Client

    with dask_processes(3) as cluster:
        with Client(cluster.address, timeout=10) as c:
            pid_of = c.run(os.getpid)
        w = sorted(pid_of)
        victim = pid_of[w[0]]
        job = _job(cluster.address, w, str(tmp_path))
        stopped, woke, ended = threading.Event(), threading.Event(), threading.Event()
        restored_while_stopped: list[bool] = []
        owner, name = MOMENTS[moment]
        entered = getattr(owner, name)

        def stop_on_entering(self, *args, **kwargs):  # noqa: ANN001, ANN202 - the method it wraps
            if len(job.iterations) >= STOP_AT and not stopped.is_set():
                os.kill(victim, signal.SIGSTOP)  # the coordinator now waits on shard 0 (or soon will)
                stopped.set()
            return entered(self, *args, **kwargs)

        def wake_after_the_restore() -> None:  # the machine wakes mid-run, after the restore
            if not stopped.wait(120) or ended.is_set():
                return
            deadline = time.monotonic() + 60  # a restore that waits for the wake-up fails the test below
            while not job.events.of(ShardLost) and not ended.is_set() and time.monotonic() < deadline:
                time.sleep(0.1)
            restored_while_stopped.append(bool(job.events.of(ShardLost)))
            os.kill(victim, signal.SIGCONT)
            woke.set()

        monkeypatch.setattr(owner, name, stop_on_entering)
        waker = threading.Thread(target=wake_after_the_restore, daemon=True)
        waker.start()
        try:
            with job:
                loss, report = _final_loss(job)
        finally:
            ended.set()
            stopped.set()
            waker.join(10)
            os.kill(victim, signal.SIGCONT)
    assert woke.is_set() and restored_while_stopped == [True]  # the restore did not wait for the wake-up
    f = report["faults"]
    assert [h["worker"] for h in f["workers_hung"]] == [w[0]] and f["workers_hung"][0]["shards"] == [0]
    assert f["shards_lost"] == f["shards_restored"] == 1
    on_victim = [r for r in report["replicas"] if r["worker"] == w[0]]
    assert [r["state"] for r in on_victim] == ["lost"], report["replicas"]
    assert [r["state"] for r in report["replicas"] if r["worker"] != w[0]] == ["paused", "paused"]
    assert abs(loss - undisturbed) <= 1e-6 * undisturbed, (loss, undisturbed)
