"""What an emulated cluster needs from this machine, and the one line that says what is missing.

An emulated host is a network namespace joined to a bridge by a veth pair, its link shaped by ``tc``, its
processes under a CPU quota (Handigol et al., "Reproducible network experiments using container-based
emulation", CoNEXT 2012, as Mininet builds them). That takes root, the kernel's network namespaces, veth
and bridge links, a token-bucket qdisc, a CPU controller (cgroup v1 or v2) and the pyroute2 library.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_controller() -> tuple[int, Path] | None:
    """The CPU controller's version and the folder dbkit's groups go in: ``(1, /sys/fs/cgroup/cpu)`` on
    cgroup v1, ``(2, /sys/fs/cgroup)`` on v2 with ``cpu`` enabled; ``None`` if neither."""
    v1 = CGROUP_ROOT / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        return 1, v1
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        return 2, CGROUP_ROOT
    return None


def missing() -> str | None:
    """``None`` if an emulated cluster can be built here, else what is missing, in one line."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "building an emulated cluster needs root (network namespaces, links and CPU groups)"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "building an emulated cluster needs the pyroute2 package (pip install pyroute2)"
    if not Path("/proc/self/ns/net").exists():
        return "this kernel has no network namespaces (/proc/self/ns/net)"
    if not Path("/sys/class/net").exists():
        return "this system has no /sys/class/net: no links to build hosts with"
    if cpu_controller() is None:
        return "this system has no cgroup CPU controller (neither /sys/fs/cgroup/cpu nor cgroup v2's cpu)"
    return None
