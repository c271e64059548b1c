import time

import psutil
import pytest


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


@pytest.fixture(scope="session")
def local_cluster():
    """One real 2-process LocalCluster shared by the cluster tests."""
    from dbkit.cluster import Cluster

    with Cluster(n_workers=2) as cluster:
        yield cluster
