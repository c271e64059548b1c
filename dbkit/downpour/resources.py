"""What a Downpour job holds on the cluster, released once: by ``stop()``, or when the job is collected
(a ``weakref.finalize`` holds this object, never the job)."""

from __future__ import annotations

import gc
from typing import Any

from ..runtime.protocol import Runtime
from .fleet import Fleet
from .placement import Placement


class DownpourResources:
    """What a Downpour job holds on the cluster; released once, by ``stop()`` or when the job is collected."""

    def __init__(self) -> None:
        self.cluster: Runtime | None = None
        self.placement: Placement | None = None
        self.fleet: Fleet | None = None
        self.monitor: Any = None  # the runtime's ``every`` loops (a thread, or a task in virtual time)
        self.heartbeat: Any = None

    def release(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.halt(timeout=5.0)
        if self.placement is not None:
            self.placement.heartbeat.clear()
        if self.monitor is not None:  # one stuck in a call to a lost scheduler is not waited for
            self.monitor.halt(timeout=1.0 if self.cluster is not None and self.cluster.lost(0) else 30.0)
        fleet, placement, cluster = self.fleet, self.placement, self.cluster
        try:  # on the runtime (at a simulated instant on a simulated cluster)
            (cluster.call if cluster is not None else _now)(lambda: _let_go(fleet, placement))
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
        if cluster is not None:
            cluster.close()
        gc.collect()  # actor proxies and Futures can sit in reference cycles; free them now


def _let_go(fleet: Fleet | None, placement: Placement | None) -> None:
    """Tell the replicas to stop (not waiting), then forget the replicas' and the shards' actors."""
    if fleet is not None:
        try:
            fleet.steer(stop=True, wait=0)
        except Exception:  # noqa: BLE001 - the cluster may be gone already
            pass
        fleet.release()
    if placement is not None:
        placement.release()


def _now(fn: Any) -> Any:
    return fn()
