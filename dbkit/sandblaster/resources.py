"""What a Sandblaster job holds on the cluster, released once: by ``stop()``, or when the job is
collected (a ``weakref.finalize`` holds this object, never the job)."""

from __future__ import annotations

import gc
from typing import Any

from ..jobs import Gate
from ..jobs.heartbeat import Heartbeat
from ..ps import ShardedParameters
from ..runtime.protocol import Runtime
from .batch import UnitBatch
from .coordinator import LBFGSCoordinator


class SandblasterResources:
    """The coordinator's thread and gate, the heartbeat, the batch, the shards and the session."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.thread: Any = None  # the coordinator's loop (a thread, or a task in virtual time)
        self.heartbeat: Any = None
        self.pings: Heartbeat | None = None  # the heartbeat thread's pings, each holding a shard's proxy
        self.batch: UnitBatch | None = None
        self.coordinator: LBFGSCoordinator | None = None
        self.server: ShardedParameters | None = None
        self.cluster: Runtime | None = None

    def release(self) -> None:
        """Stop the coordinator and drop every holder of shard proxies (they keep the actors alive)."""
        self.gate.stop()
        if self.heartbeat is not None:
            self.heartbeat.halt(timeout=5.0)
        if self.pings is not None:
            self.pings.clear()
        if self.thread is not None:
            self.thread.halt()
        if self.batch is not None:
            self.batch.release()
        if self.coordinator is not None:
            self.coordinator.use(None)
        self.server = None
        if self.cluster is not None:
            self.cluster.close()
        gc.collect()
