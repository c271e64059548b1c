"""What a Downpour job holds on the cluster, released once: by ``stop()``, or when the job is collected
(a ``weakref.finalize`` holds this object, never the job)."""

from __future__ import annotations

import gc

from ..jobs import JobThread
from ..runtime.protocol import Runtime
from .fleet import Fleet
from .placement import Placement


class DownpourResources:
    """What a Downpour job holds on the cluster; released once, by ``stop()`` or when the job is collected."""

    def __init__(self) -> None:
        self.cluster: Runtime | None = None
        self.placement: Placement | None = None
        self.fleet: Fleet | None = None
        self.monitor: JobThread | None = None
        self.heartbeat: JobThread | None = None

    def release(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.halt(timeout=5.0)
        if self.placement is not None:
            self.placement.heartbeat.clear()
        if self.monitor is not None:  # one stuck in a call to a lost scheduler is not waited for
            self.monitor.halt(timeout=1.0 if self.cluster is not None and self.cluster.lost(0) else 30.0)
        if self.fleet is not None:
            try:
                self.fleet.steer(stop=True, wait=0)
            except Exception:  # noqa: BLE001 - the cluster may be gone already
                pass
            self.fleet.release()
        if self.placement is not None:
            self.placement.release()
        if self.cluster is not None:
            self.cluster.close()
        gc.collect()  # actor proxies and Futures can sit in reference cycles; free them now
