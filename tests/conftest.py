import contextlib
import dataclasses
import shutil
import time
from pathlib import Path

import psutil
import pytest

CLUSTER_FIXTURES = {"local_cluster", "dask_cluster_address", "roomy_cluster", "dask_processes"}
CLUSTER_MODULES = {"test_cli.py", "test_benchmarks.py", "test_recovery.py", "test_emulate.py",  # they start clusters
                   "test_lessons.py"}  # (the lessons: in their kernels)


def pytest_configure(config):
    """A shell without job control starts a background command with SIGINT ignored (``cmd &`` in a script),
    and Python then leaves it ignored, as do the subprocesses the Ctrl-C tests start: they would wait for an
    interrupt that never comes. The suite tests Ctrl-C as a terminal delivers it, so it puts Python's own
    handler back (the children it starts then get the default, as from a terminal)."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items):
    """Tests that start a Dask cluster carry the ``cluster`` marker, so ``pytest -m "not cluster"``
    runs the in-process half alone: those using a cluster fixture, the modules that run dbkit in
    subprocesses, and the lessons."""
    for item in items:
        path = Path(str(item.fspath))
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())) or path.name in CLUSTER_MODULES:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session", autouse=True)
def shipped_profiles(tmp_path_factory):
    """The simulator's ``here`` profile is the one dbkit ships, not this machine user's last calibration."""
    import os

    folder = tmp_path_factory.mktemp("profiles")
    before = os.environ.get("DBKIT_PROFILES")
    os.environ["DBKIT_PROFILES"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("DBKIT_PROFILES", None)
    else:
        os.environ["DBKIT_PROFILES"] = before


@pytest.fixture(autouse=True)
def in_process_tests_start_no_cluster(request, monkeypatch):
    """A test without the ``cluster`` marker that starts a Dask cluster fails: the marker must be true."""
    if request.node.get_closest_marker("cluster") is None:
        from dbkit.runtime.dask import cluster

        def refuse(*args, **kwargs):
            raise AssertionError(f"{request.node.nodeid} starts a Dask cluster: mark it @pytest.mark.cluster")

        monkeypatch.setattr(cluster.Cluster, "__init__", refuse)


def is_helper(p: psutil.Process) -> bool:
    """multiprocessing's resource tracker: one per parent, lives until the parent exits."""
    try:
        return "resource_tracker" in " ".join(p.cmdline())
    except psutil.Error:
        return True


def live_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and not is_helper(p):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.fixture(scope="session", autouse=True)
def no_leaked_processes():
    """Every cluster, worker and kernel a test starts must be gone at the end."""
    before = {p.pid for p in live_children()}
    yield
    deadline = time.time() + 20
    while True:
        left = [p for p in live_children() if p.pid not in before]
        if not left or time.time() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"processes left behind: {[(p.pid, p.name(), p.cmdline()[:4]) for p in left]}"


def leftovers(cluster, tag: str, timeout: float = 10.0) -> dict:
    """Tasks and actors whose keys contain ``tag`` (a job's) still on the workers, after up to ``timeout`` s."""
    def find(dask_worker, tag=tag):
        return [str(k) for k in list(dask_worker.state.actors) + list(dask_worker.state.tasks) if tag in str(k)]

    deadline = time.time() + timeout
    while True:
        left = {w: v for w, v in cluster.client.run(find).items() if v}
        if not left or time.time() > deadline:
            return left
        time.sleep(0.2)


@dataclasses.dataclass
class DaskProcesses:
    """What ``real_dask`` started; unpacks as ``(address, workers)``."""

    address: str
    workers: list
    scheduler: object

    def __iter__(self):
        return iter((self.address, self.workers))


@contextlib.contextmanager
def real_dask(n_workers: int, prefixes: dict[int, list[str]] | None = None):
    """A real ``dask scheduler`` and ``n_workers`` ``dask worker`` processes (no nannies) on 127.0.0.1;
    yields ``DaskProcesses`` (it unpacks as ``(address, worker processes)``). Every process is ended on exit.
    ``prefixes``: worker number -> a command its process starts under (``setpriv ...``: fewer rights).

    The scheduler picks its own port (``--port 0``) and writes its address to a scheduler file: a port
    chosen here and handed over could be taken by another socket before the scheduler binds it (a CI
    run once lost a test to that). A scheduler that fails to start fails the test with its own log."""
    import json
    import subprocess
    import sys
    import tempfile

    from distributed import Client

    folder = Path(tempfile.mkdtemp(prefix="dbkit-real-dask-"))
    scheduler_file, log = folder / "scheduler.json", folder / "scheduler.log"
    procs: list[subprocess.Popen] = []
    try:
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
                 "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(scheduler_file)],
                stdout=subprocess.DEVNULL, stderr=out))
        deadline = time.time() + 60
        address = None
        while address is None:  # the file is written once the scheduler listens
            if procs[0].poll() is not None:
                raise RuntimeError(f"dask scheduler exited ({procs[0].returncode}):\n{log.read_text()[-3000:]}")
            if time.time() > deadline:
                raise TimeoutError(f"dask scheduler did not start within 60 s:\n{log.read_text()[-3000:]}")
            try:
                address = json.loads(scheduler_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        for i in range(n_workers):
            procs.append(subprocess.Popen(
                [*(prefixes or {}).get(i, []), sys.executable, "-m", "distributed.cli.dask_worker", address,
                 "--host", "127.0.0.1", "--nthreads", "1", "--dashboard-address", "127.0.0.1:0", "--no-nanny"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        while True:  # wait for every worker to join
            try:
                with Client(address, timeout=10) as c:
                    c.wait_for_workers(n_workers, timeout=30)
                    break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        yield DaskProcesses(address, procs[1:], procs[0])
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
        # a healthy worker closes in about a second; one that was stopped and dropped from the scheduler
        # (the hang tests) may try to reach it for a minute: 10 s in all, then SIGKILL
        deadline = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def dask_processes():
    """``real_dask``: start a scheduler and N workers of one's own (to kill some of them)."""
    return real_dask


@pytest.fixture(scope="session")
def dask_cluster_address():
    """A real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1; yields the address."""
    with real_dask(2) as (address, _):
        yield address


@pytest.fixture(params=["dask", "in-process"])
def where(request):
    """Where a job runs, as keyword arguments: the shared LocalCluster's client, or two in-process
    workers (the same drivers, no Dask). A test taking it checks both."""
    if request.param == "dask":
        yield {"client": request.getfixturevalue("local_cluster").client}
        return
    from dbkit.runtime import InProcessCluster

    with InProcessCluster(workers=2) as machines:
        yield {"cluster": machines}


@pytest.fixture(params=[pytest.param("dask", marks=pytest.mark.cluster), "in-process", "simulated"])
def anywhere(request):
    """Where a job runs, on each of the three runtimes: the shared LocalCluster's client, two in-process
    workers, or a simulated cluster (the ``here`` profile). A test taking it checks all three."""
    if request.param == "dask":
        yield {"client": request.getfixturevalue("local_cluster").client}
    elif request.param == "in-process":
        from dbkit.runtime import InProcessCluster

        with InProcessCluster(workers=2) as machines:
            yield {"cluster": machines}
    else:
        from dbkit.sim import Cluster

        yield {"cluster": Cluster()}


@pytest.fixture(scope="session")
def local_cluster():
    """One real 2-process LocalCluster shared by the cluster tests."""
    from dbkit.runtime.dask import Cluster

    with Cluster(n_workers=2) as cluster:
        yield cluster
