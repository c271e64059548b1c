"""The in-process runtime: Downpour's drivers (fleet, placement, shards) on workers in this process,
checked against plain SGD and against the same job on a real LocalCluster; the workers' actor and task
semantics; bad arguments; cleanup."""

import threading
import time

import numpy as np
import pytest

import dbkit
from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.runtime import InProcessCluster
from dbkit.runtime.inprocess.workers import ActorProxy, Task, Worker
from dbkit.sync_sgd import SGDTrainer
from dbkit.telemetry import validate_report


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.fixture
def machines():
    with InProcessCluster(workers=2) as m:
        yield m


def _dbkit_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dbkit")]


def test_one_replica_one_shard_in_process_reproduces_sync_sgd_exactly(digits, machines):
    cfg = RunConfig.make(algorithm="downpour", steps=60, lr=0.05, optimizer="sgd", replicas=1, shards=1,
                         overlap=False)
    net = nn.build("mlp", 64, 10, l2=cfg.l2)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    with dbkit.DownpourSGD(net, digits, config=cfg, cluster=machines) as d:
        d.fit(steps=60, progress=False)
        assert d.snapshot().step == 60
        params = d.parameters()
    assert params.tobytes() == base.params.tobytes()


@pytest.mark.cluster
def test_the_same_job_on_a_local_cluster_and_in_process_gives_the_same_parameters_and_report(digits, local_cluster,
                                                                                              machines):
    cfg = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="adagrad", replicas=1, shards=2, overlap=False,
                         eval_every=20)
    reports, params = {}, {}
    for name, where in (("dask", dict(client=local_cluster.client)), ("in-process", dict(cluster=machines))):
        with dbkit.DownpourSGD("mlp", digits, config=cfg, **where) as d:
            d.fit(steps=80, progress=False)
            params[name] = d.parameters()
        reports[name] = d.report()
    assert params["dask"].tobytes() == params["in-process"].tobytes()
    for report in reports.values():
        assert validate_report(report) == []
    assert reports["in-process"]["cluster"]["kind"] == "in-process"
    kinds = {name: {e["type"] for e in r["events"]} for name, r in reports.items()}
    assert kinds["dask"] == kinds["in-process"]
    # (when the monitor evaluates in between depends on its polls; both end evaluated at step 80)
    assert [rep["history"][-1]["step"] for rep in reports.values()] == [80, 80]


def test_replicas_train_asynchronously_and_are_steered_in_process(digits, machines):
    with dbkit.DownpourSGD("mlp", digits, cluster=machines, replicas=2, shards=2, optimizer="adagrad", lr=0.05,
                           eval_every=100) as d:
        d.fit(steps=400, progress=False)
        d.set(n_fetch=4, n_push=4)
        assert all(r.n_push == 4 for r in d.replicas())  # applied on the replicas, not just asked
        assert d.add_replicas(1) == [2]
        d.fit(steps=200, progress=False)
        assert d.replicas()[2].pushes > 0
        d.pause()
        frozen = d.parameters()
        assert d.parameters().tobytes() == frozen.tobytes()
        report = d.report()
    assert validate_report(report) == []
    assert report["final"]["test_accuracy"] >= 0.9
    assert sum(s["updates"] for s in report["shards"]) == 2 * sum(r["pushes"] for r in report["replicas"])
    assert {s["worker"] for s in report["shards"]} == set(machines.workers())


def test_stop_releases_every_actor_and_thread_and_leaves_the_machines_running(digits, machines):
    before = _dbkit_threads()
    d = dbkit.DownpourSGD("linear", digits, cluster=machines, replicas=2, shards=2, lr=0.02, optimizer="sgd")
    d.fit(steps=40, progress=False)
    assert any(machines.placed().values())
    d.stop()
    d.stop()  # idempotent
    assert machines.placed() == {w: [] for w in machines.workers()}
    leftover = [t for t in _dbkit_threads() if t not in before and "actors" not in t]
    assert leftover == []
    with dbkit.DownpourSGD("linear", digits, cluster=machines, replicas=1, shards=1) as again:  # still usable
        again.fit(steps=10, progress=False)
    assert validate_report(d.report()) == []  # figures survive the stop


def test_bad_cluster_arguments_are_refused_before_anything_starts(digits, machines):
    with pytest.raises(ValueError, match="one of cluster="):
        dbkit.DownpourSGD("linear", digits, cluster=machines, scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(TypeError, match="for a Dask cluster pass client="):
        dbkit.DownpourSGD("linear", digits, cluster=object())
    with pytest.raises(ValueError, match="one of cluster="):
        dbkit.SandblasterLBFGS("linear", digits, cluster=machines, client=object())
    with pytest.raises(TypeError, match="for a Dask cluster pass client="):
        dbkit.SyncSGD("linear", digits, cluster="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="workers must be"):
        InProcessCluster(workers=0)
    machines.close()
    with pytest.raises(RuntimeError, match="closed"):
        machines.session("x")


class _Counter:
    def __init__(self, start: np.ndarray) -> None:
        self.values = start

    def add(self, x: np.ndarray) -> str:
        self.values += x
        return threading.current_thread().name

    def total(self) -> float:
        return float(self.values.sum())

    def hold(self) -> None:
        self.release.wait(5)

    def add_from(self, other) -> float:
        return other.total().result(timeout=5)


def test_actor_calls_run_in_order_on_their_workers_one_thread_on_copies_of_the_arguments(machines):
    session = machines.session("t")
    start = np.zeros(3)
    a = session.place_actor("a", _Counter, start, worker=machines.workers()[1])
    start += 100  # the actor holds its own copy, as one Dask unpickled would
    threads = {a.add(np.ones(3)).result(timeout=5) for _ in range(20)}
    assert a.total().result(timeout=5) == 60.0
    assert len(threads) == 1 and machines.workers()[1] in threads.pop()
    assert session.registry.worker("a") == machines.workers()[1]
    b = session.place_actor("b", _Counter, np.zeros(3), worker=machines.workers()[0])
    assert b.add_from(a).result(timeout=5) == 60.0  # a proxy sent along still names the same actor
    session.close()
    assert machines.placed() == {w: [] for w in machines.workers()}
    with pytest.raises(RuntimeError, match="was lost"):
        a.total()


def test_a_lost_worker_refuses_calls_and_its_tasks_count_as_lost():
    w = Worker("inprocess://test")
    w.add("k", _Counter(np.zeros(1)))
    release = threading.Event()
    task = Task(w, "task", release.wait, (), {})
    assert task.status == "pending"
    w.lose()
    assert task.status == "lost"
    with pytest.raises(RuntimeError, match="was lost"):
        w.call("k", "total", (), {})
    release.set()
    assert task.join(5)
    ran = []
    late = Task(w, "late", lambda: ran.append(1), (), {})  # sent after the death
    assert late.join(5) and late.status == "lost" and ran == []
    failing = Task(Worker("inprocess://other"), "bad", lambda: 1 / 0, (), {})
    assert failing.join(5) and failing.status == "error"
    assert isinstance(failing.exception(1), ZeroDivisionError)


def test_a_call_still_queued_when_its_callers_worker_is_lost_never_runs():
    """A lost machine's messages do not arrive: a push queued behind a slow call on the shard's worker
    is dropped if the replica's worker dies before it runs (else it lands after the coordinator has
    asked what landed, and the unit it carries counts twice). A call already running is kept."""
    shard_host, replica_host = Worker("inprocess://shard"), Worker("inprocess://replica")
    shard = _Counter(np.zeros(1))
    shard.release = release = threading.Event()
    shard_host.add("k", shard)
    busy = shard_host.call("k", "hold", (), {})  # the shard's one actor thread is busy
    push = ActorProxy(shard_host, "k", caller=replica_host).add(np.ones(1))  # sent, still queued
    kept = ActorProxy(shard_host, "k").add(np.ones(1) * 10)  # the coordinator's own, sent after
    replica_host.lose()
    release.set()
    busy.result(timeout=5)
    with pytest.raises(RuntimeError, match="was lost"):
        push.result(timeout=5)
    kept.result(timeout=5)
    assert shard_host.call("k", "total", (), {}).result(timeout=5) == 10.0
    shard_host.close()


# ---- a lost machine, in process (as tests/test_recovery.py does with killed worker processes) --------------
def test_a_lost_shard_comes_back_from_its_checkpoint_in_process_and_training_goes_on(digits, tmp_path):
    from dbkit.telemetry import Checkpointed, ReplicaEvent, ShardLost

    with InProcessCluster(workers=3) as m:
        w = m.workers()
        with dbkit.DownpourSGD("mlp", digits, cluster=m, replicas=2, shards=2, lr=0.05, checkpoint_dir=str(tmp_path),
                               checkpoint_every=0.05, shard_workers=[w[0], w[1]], replica_workers=[w[2], w[1]]) as job:
            job.fit(steps=300, progress=False)
            assert job.events.of(Checkpointed)
            lost = next(s.index for s in job.shards() if s.worker == w[0])
            m.lose_worker(w[0])
            job.fit(steps=600, progress=False)
            assert job.state == "paused"  # it went on: not failed
            shards = job.shards()
            report = job.report()
    assert validate_report(report) == []
    (event,) = job.events.of(ShardLost)
    saved = {c.versions[lost] for c in job.events.of(Checkpointed) if c.t <= event.t}
    assert event.shard == lost and event.worker == w[0] and event.restored_on in (w[1], w[2])
    assert event.checkpoint_version in saved  # no kill lands mid-save here: the worker is lost between calls
    assert event.updates_lost == event.version_read - event.checkpoint_version >= 0
    assert shards[lost].worker == event.restored_on and shards[lost].version >= event.checkpoint_version
    assert report["faults"]["shards_lost"] == report["faults"]["shards_restored"] == 1
    restarted = [e for e in job.events.of(ReplicaEvent) if e.what == "restarted"]
    assert all(e.worker != w[0] for e in restarted)
    assert report["final"]["test_accuracy"] > 0.9


def test_a_replica_lost_with_its_worker_in_process_is_replaced_on_its_data(digits):
    from dbkit.telemetry import ReplicaEvent

    with InProcessCluster(workers=3) as m:
        w = m.workers()
        with dbkit.DownpourSGD("mlp", digits, cluster=m, replicas=2, shards=2, lr=0.05,
                               shard_workers=[w[0], w[1]], replica_workers=[w[2], w[1]]) as job:
            job.fit(steps=200, progress=False)
            first = job.replicas()[0]
            m.lose_worker(w[2])  # replica 0's worker; no shard there
            deadline = time.monotonic() + 60  # the paused job's monitor notices it and starts a replacement
            while not any(e.what == "restarted" for e in job.events.of(ReplicaEvent)):
                assert time.monotonic() < deadline, "the lost replica was never replaced"
                time.sleep(0.02)
            job.fit(steps=400, progress=False)  # (fitting first, the other replica might take all 400 steps)
            figures = {r.replica: r for r in job.replicas()}
            report = job.report()
    events = job.events.of(ReplicaEvent)
    assert [e.replica for e in events if e.what == "lost"] == [0]
    (r,) = [e for e in events if e.what == "restarted"]
    assert r.worker == w[1] and r.reason == "replaces replica 0"
    assert figures[0].state == "lost" and figures[0].steps >= first.steps  # it stopped, it was not stepped back
    assert figures[r.replica].steps > 0 and report["faults"]["replicas_restarted"] == 1


def test_a_job_resumes_from_its_checkpoint_in_process_bit_for_bit(digits, tmp_path, machines):
    from dbkit.ps import read_checkpoint

    with dbkit.DownpourSGD("mlp", digits, cluster=machines, replicas=2, shards=2, lr=0.05) as job:
        job.fit(steps=200, progress=False)
        job.checkpoint(tmp_path / "ckpt")
    saved = read_checkpoint(tmp_path / "ckpt")
    resumed = dbkit.DownpourSGD.from_checkpoint(tmp_path / "ckpt", data=digits, cluster=machines)
    with resumed:
        resumed._start(paused=True)  # placed, not yet trained
        params, acc = resumed.parameter_state()
        assert np.array_equal(resumed.layout.to_server(params), saved.params)
        assert np.array_equal(resumed.layout.to_server(acc), saved.opt_state)
        assert [s.version for s in resumed.shards()] == list(saved.manifest.versions)


def test_sync_sgd_with_its_parameters_on_in_process_shards_equals_sync_sgd_in_memory(digits, machines):
    settings = dict(lr=0.05, optimizer="adagrad", batch_size=32, steps=50, seed=3)
    with dbkit.SyncSGD("mlp", digits, **settings) as alone:
        alone.fit(progress=False)
    with dbkit.SyncSGD("mlp", digits, cluster=machines, shards=2, **settings) as sharded:
        sharded.fit(progress=False)
        assert len(sharded.shards()) == 2 and {s.worker for s in sharded.shards()} == set(machines.workers())
        report = sharded.report()
    assert sharded.parameters().tobytes() == alone.parameters().tobytes()
    assert validate_report(report) == [] and report["cluster"]["kind"] == "in-process"


# ---- runtime="in-process": a job's own in-process workers, from the API and the command line --------------
def test_a_job_with_runtime_in_process_starts_and_closes_its_own_workers(digits):
    before = set(_dbkit_threads())
    with dbkit.DownpourSGD("linear", digits, runtime="in-process", workers=3, replicas=2, shards=3, lr=0.02,
                           optimizer="sgd") as d:
        d.fit(steps=40, progress=False)
        assert {s.worker for s in d.shards()} == {f"inprocess://worker-{k}" for k in range(3)}
    assert validate_report(d.report()) == [] and d.report()["cluster"]["kind"] == "in-process"
    assert set(_dbkit_threads()) <= before  # its workers' actor threads stopped with it
    with pytest.raises(ValueError, match="give one or the other"):
        RunConfig.make(algorithm="downpour", runtime="in-process", scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="runtime must be one of"):
        RunConfig.make(algorithm="downpour", runtime="threads")
    with InProcessCluster(workers=1) as m, pytest.raises(ValueError, match="not both"):
        dbkit.SandblasterLBFGS("linear", digits, runtime="in-process", cluster=m)


def test_the_command_line_runs_a_job_on_in_process_workers(tmp_path):
    import json
    import subprocess
    import sys

    argv = ["run", "downpour", "--runtime", "in-process", "--replicas", "2", "--shards", "2", "--steps", "200",
            "--report", str(tmp_path / "r.json")]
    code = (f"import sys\nfrom dbkit.cli.main import main\ncode = main({argv!r})\n"
            "print('dask loaded:', sorted(k for k in sys.modules if k.split('.')[0] in ('dask', 'distributed')))\n"
            "sys.exit(code)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert validate_report(report) == [] and report["config"]["runtime"] == "in-process"
    assert report["cluster"]["kind"] == "in-process" and "inprocess://worker-0" in out.stdout
    assert "dask loaded: []" in out.stdout


def test_shards_are_refused_with_a_clear_error_when_no_worker_is_left(machines):
    from dbkit.runtime.shards import start_shards

    session = machines.session("no-workers")
    shards = start_shards(session, np.zeros(10, np.float32), 2)  # the reference: two workers, two shards
    assert sorted(shards.workers) == sorted(machines.workers())
    for address in machines.workers():
        machines.lose_worker(address)
    with pytest.raises(RuntimeError, match="no workers to place parameter shards on"):
        start_shards(session, np.zeros(10, np.float32), 2, prefix="again")
    session.close()
