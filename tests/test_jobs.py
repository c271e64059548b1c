"""The one Job interface: the same job through the three algorithms, changes queued from several
threads, jobs of one process (a second one warns, stop_all, garbage collection), and the change
queue itself in process."""

import gc
import threading
import time
import warnings
import weakref

import pytest

import dbkit
from dbkit import data
from dbkit.jobs import AnotherJobRunning, ChangeQueue, running
from dbkit.telemetry import Change, ReplicaEvent, Sample, StateChange, validate_report

from .conftest import leftovers


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def _check_stream(job, report):
    samples = job.events.of(Sample)
    evaluated = [s for s in samples if s.evaluation is not None]
    assert evaluated and job.history == report["history"]
    assert [(h["step"], h["t"], h["train_loss"]) for h in job.history] == \
        [(s.step, s.t, s.evaluation.train_loss) for s in evaluated]  # the history is read off the samples
    assert [e["type"] for e in report["events"]].count("Sample") == len(samples)
    assert [e.seq for e in job.events] == list(range(len(job.events)))
    states = [e.state for e in job.events.of(StateChange)]
    assert states[0] == "running" and "paused" in states


@pytest.mark.cluster
@pytest.mark.parametrize("algorithm", ["sgd", "downpour", "sandblaster"])
def test_the_same_job_through_every_algorithm(digits, where, algorithm):
    cls = {"sgd": dbkit.SyncSGD, "downpour": dbkit.DownpourSGD, "sandblaster": dbkit.SandblasterLBFGS}[algorithm]
    steps = 4 if algorithm == "sandblaster" else 200
    extra = {"replicas": 2} if algorithm != "sgd" else {"on_cluster": True}
    with cls("linear", digits, eval_every=50, l2=1e-3, **where, **extra) as job:
        assert job.state == "created"
        job.start()
        assert job.state == "running"
        job.fit(steps=steps, progress=False)
        assert job.state in ("paused", "finished") and job.snapshot().step >= steps
        snap = job.snapshot()
        assert snap.algorithm == algorithm and snap.replicas and snap.evaluation is not None
        assert snap.sample is job.events.last(Sample) and snap.events == len(job.events)
        job.pause()
        assert job.state in ("paused", "finished")
        report = job.report()  # while it runs
    assert validate_report(report) == [] and report["algorithm"] == algorithm
    _check_stream(job, job.report())
    assert job.report()["state"] in ("stopped", "finished") and job.stopped
    with pytest.raises(RuntimeError, match="stopped"):
        job.start()
    with pytest.raises(RuntimeError, match="stopped"):
        job.set(paused=False)


@pytest.mark.cluster
def test_set_from_several_threads_applies_the_last_values_and_records_every_change_in_order(digits,
                                                                                           local_cluster):
    with dbkit.DownpourSGD("linear", digits, replicas=2, shards=1, client=local_cluster.client) as job:
        job.start()
        asked = []
        lock = threading.Lock()

        def mover(offset):
            for k in range(8):
                value = 1 + offset * 8 + k
                job.set(wait=k % 2 == 0, n_push=value, lr=0.01 * value)
                with lock:
                    asked.append(value)

        threads = [threading.Thread(target=mover, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        job.set(n_fetch=3)  # waits: everything asked before it has been handled too
        changes = [e for e in job.events.of(Change) if e.setting == "n_push"]
        assert sorted(c.new for c in changes) == sorted(asked)  # every request is in the stream once
        assert [c.asked for c in changes] == sorted(c.asked for c in changes)  # in the order asked
        applied = [c for c in changes if not c.superseded]
        last = changes[-1]
        assert not last.superseded and job.config.downpour.n_push == last.new  # the latest value won
        assert all(c.applied >= c.asked for c in applied) and all(c.applied is None for c in changes
                                                                  if c.superseded)
        assert all(r.n_push == last.new for r in job.replicas() if r.live)  # and reached the replicas
        assert job.config.lr == pytest.approx(0.01 * last.new)
        with pytest.raises(ValueError, match="n_push must be"):
            job.set(n_push=0)
        assert job.config.downpour.n_push == last.new


@pytest.mark.cluster
def test_a_second_job_warns_and_stop_all_leaves_nothing_behind(digits, local_cluster):
    first = dbkit.DownpourSGD("linear", digits, replicas=1, shards=1, client=local_cluster.client)
    first.start()
    second = dbkit.DownpourSGD("linear", digits, replicas=1, shards=1, client=local_cluster.client)
    with pytest.warns(AnotherJobRunning, match=r"DownpourSGD linear on digits.*dbkit\.stop_all\(\)"):
        second.start()
    assert running() == [first, second]
    assert dbkit.stop_all() == 2
    assert first.stopped and second.stopped and running() == []
    for job in (first, second):
        assert not leftovers(local_cluster, job.tag)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing runs now: a new job starts without a warning
        with dbkit.SyncSGD("linear", digits) as third:
            third.start()


@pytest.mark.cluster
def test_a_job_nobody_refers_to_is_collected_and_stops_its_replicas(digits, local_cluster):
    job = dbkit.DownpourSGD("linear", digits, replicas=2, shards=1, client=local_cluster.client)
    job.start()
    time.sleep(0.5)
    tag = job.tag
    events = job.events  # the stream outlives the job
    assert leftovers(local_cluster, tag, timeout=0)
    ref = weakref.ref(job)
    del job
    # The job's monitor holds it while a tick runs; a collection during a tick finds it still
    # referred to, and the next one (Python's own, later) frees it. Collect until it is gone.
    deadline = time.time() + 10
    while ref() is not None and time.time() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert ref() is None, gc.get_referrers(ref())
    assert not leftovers(local_cluster, tag)
    assert [e for e in events.of(ReplicaEvent) if e.what == "started"]
    assert running() == []


def test_fit_refuses_an_empty_budget_and_an_unknown_setting(digits):
    job = dbkit.SyncSGD("linear", digits)
    with pytest.raises(ValueError, match="steps must be"):
        job.fit(steps=0)
    with pytest.raises(ValueError, match="seconds must be"):
        job.fit(seconds=-1)
    with pytest.raises(ValueError, match="cannot change while training"):
        job.set(n_push=4)
    with pytest.raises(ValueError, match="paused must be"):
        job.set(paused="yes")
    with pytest.raises(RuntimeError, match="has not started"):
        job.pause()
    job.set(lr=0.2)  # before start: recorded in the config, used when it starts
    assert job.config.lr == 0.2 and job.state == "created"
    job.stop()
    assert job.state == "stopped"


def test_the_change_queue_applies_in_order_and_the_latest_value_wins():
    applied, superseded = [], []
    started, release = threading.Event(), threading.Event()

    class Target:
        def apply(self, request, effective, gone):
            if effective.get("x") == "slow":
                started.set()
                release.wait(5)
            if effective.get("x") == "bad":
                raise ValueError("bad value")
            applied.append(effective)
            superseded.append(gone)

    target = Target()
    queue = ChangeQueue(target.apply)
    clock = iter(range(100)).__next__
    queue.submit({"x": "slow"}, clock, wait=False)
    started.wait(5)
    queue.submit({"x": 1, "y": 1}, clock, wait=False)  # waits behind "slow"
    queue.submit({"x": 2}, clock, wait=False)  # asks x again: x=1 never applies
    assert queue.pending() == {"x": 2, "y": 1}
    release.set()
    deadline = time.time() + 5
    while not queue.idle() and time.time() < deadline:
        time.sleep(0.01)
    with pytest.raises(ValueError, match="bad value"):
        queue.submit({"x": "bad"}, clock)  # its error reaches its caller ...
    queue.submit({"y": 3}, clock)  # ... and the next request still runs
    assert applied == [{"x": "slow"}, {"y": 1}, {"x": 2}, {"y": 3}]
    assert superseded[1] == {"x": 1} and queue.idle()


@pytest.mark.cluster
def test_a_snapshot_never_calls_dask(digits, local_cluster, monkeypatch):
    """With every way into Dask made to fail, snapshots of a trained job still answer."""
    import distributed
    from distributed.actor import Actor

    with dbkit.DownpourSGD("linear", digits, replicas=2, shards=2, client=local_cluster.client) as job:
        job.fit(steps=100, progress=False)
        job._res.monitor.halt()  # the job's own thread polls Dask; this test is about snapshot() alone
        before = job.snapshot()

        def refuse(*args, **kwargs):
            raise AssertionError("snapshot() called Dask")

        with monkeypatch.context() as m:
            for name in ("submit", "run", "nthreads", "scheduler_info", "gather", "scatter"):
                m.setattr(distributed.Client, name, refuse)
            m.setattr(Actor, "__getattr__", refuse)
            snaps = [job.snapshot() for _ in range(20)]
        assert all(s.step == before.step >= 100 and len(s.replicas) == 2 for s in snaps)
        assert snaps[-1].evaluation is not None and snaps[-1].state == "paused"


@pytest.mark.parametrize("runtime", ["in-process", "simulated"])
def test_wait_leaves_a_running_job_running_and_steerable_while_it_waits(digits, runtime):
    """A panel's job under Run All (issue #44): a later cell waits on it with a budget, a change made
    meanwhile (the panel's steering thread) is applied to the job, and the job runs on after the wait,
    unlike ``fit``, which pauses it."""
    if runtime == "simulated":
        from dbkit.sim import Cluster as SimCluster

        where = dict(cluster=SimCluster(machines=8, profile="distbelief-2012"))
    else:
        where = dict(runtime="in-process")
    with dbkit.DownpourSGD("linear", digits, replicas=1, shards=1, eval_every=50, **where) as job:
        with pytest.raises(RuntimeError, match="has not started"):
            job.wait(seconds=1)
        job.start()
        with pytest.raises(ValueError, match="seconds=... or steps"):
            job.wait()
        steering = threading.Timer(0.3, lambda: job.set(replicas=2))
        steering.start()
        before = job.snapshot().step
        job.wait(steps=400, progress=False)
        steering.join()
        assert job.state == "running" and job.snapshot().step >= before + 400
        assert job.config.replicas == 2
        deadline = time.monotonic() + 30
        while job.snapshot().live_replicas != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.snapshot().live_replicas == 2
        job.pause()
        paused_at = job.snapshot().step
        job.wait(seconds=3600, progress=False)  # a paused job's clock would not move: returns at once
        assert job.state == "paused" and job.snapshot().step == paused_at
