"""CPU shares for emulated hosts: one cgroup per host, its processes capped at a fraction of a core.

A host's group ``dbkit-h1`` (and the scheduler's ``dbkit-sched``) gets a CFS quota of ``share`` x the period:
at 0.25 its processes together use at most a quarter of one core, however many threads they run, as a
quarter-core machine would (Mininet's CPU-limited hosts do the same). cgroup v1 (``cpu.cfs_quota_us``) and
v2 (``cpu.max``) are both handled.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from .links import PREFIX
from .support import cpu_controller

# The quota's period. A host at 0.25 core runs 2.5 ms of each 10 ms, then waits: more like a slow CPU than a fast
# one that pauses. With the kernel's default 100 ms (Mininet's too), a host that spent its 25 ms waited up to 75 ms,
# and every barrier across hosts (each layer of a partitioned dense model) paid that wait: Fig. 3's dense split
# measured 0.27x at 8 hosts with 100 ms and 0.62x with 10 ms (docs/benchmarks.md).
PERIOD_US = 10_000


def _root() -> tuple[int, Path]:
    found = cpu_controller()
    if found is None:
        raise RuntimeError("this system has no cgroup CPU controller")
    return found


def group_path(name: str) -> Path:
    return _root()[1] / name


def create(name: str, share: float | None) -> Path:
    """The group ``name`` with at most ``share`` of a core (``None``: no cap); returns its folder."""
    if not name.startswith(PREFIX + "-"):
        raise ValueError(f"a dbkit CPU group's name starts with {PREFIX}-, got {name!r}")
    path = _root()[1] / name
    path.mkdir(exist_ok=True)
    set_share(name, share)
    return path


def set_share(name: str, share: float | None) -> None:
    """Cap group ``name`` at ``share`` of a core from now on (``None``: no cap); its processes keep running."""
    version, root = _root()
    path = root / name
    if not path.is_dir():
        raise ValueError(f"no CPU group {name}")
    quota = -1 if share is None else max(1000, int(share * PERIOD_US))
    if version == 1:
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        (path / "cpu.max").write_text(f"{'max' if quota < 0 else quota} {PERIOD_US}")


def share(name: str) -> float | None:
    """Group ``name``'s cap as a share of a core, from the kernel's own files (``None``: no cap)."""
    version, root = _root()
    if version == 1:
        quota = int((root / name / "cpu.cfs_quota_us").read_text())
        period = int((root / name / "cpu.cfs_period_us").read_text())
    else:
        q, per = (root / name / "cpu.max").read_text().split()
        quota, period = (-1 if q == "max" else int(q)), int(per)
    return None if quota < 0 else quota / period


def join(name: str, pid: int | None = None) -> None:
    """Put process ``pid`` (default: this one) in group ``name``; its children are born there."""
    (group_path(name) / "cgroup.procs").write_text(str(pid or os.getpid()))


def pids(name: str) -> list[int]:
    procs = group_path(name) / "cgroup.procs"
    try:
        return [int(line) for line in procs.read_text().split()]
    except FileNotFoundError:
        return []


def existing() -> list[str]:
    """The dbkit CPU groups on this machine now."""
    try:
        root = _root()[1]
    except RuntimeError:
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX + "-"))


def stop_all(grace: float = 5.0) -> None:
    """SIGTERM every process in every dbkit group, SIGKILL what is left after ``grace`` seconds, then remove
    the groups."""
    names = existing()
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        for name in names:
            for pid in pids(name):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait
        while any(pids(n) for n in names) and time.monotonic() < deadline:
            time.sleep(0.05)
    for name in names:
        try:
            group_path(name).rmdir()
        except OSError as e:
            raise RuntimeError(f"could not remove CPU group {name}: {e} (processes {pids(name)})") from e
