"""What a job's driver last knew of its run, for a report when nothing answers any more.

A lost Dask scheduler takes the workers' actors and tasks with it: the shards
can no longer be asked for their parameters or figures. The driver keeps the
parameters as last evaluated and the shards' figures as last read, so the run
still ends with a whole report (``"ended": "scheduler lost"``) instead of a
traceback.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..ps import ShardFigures
from ..training.figures import ReplicaFigures
from .snapshot import FinalState

SCHEDULER_LOST = "scheduler lost"


class LastKnown:
    """The latest parameters and shard figures a driver read, and whether its scheduler is lost.

    ``check(cluster, grace)`` reads only the client's status (``Cluster.lost``),
    so any thread may call it often; it returns the line to report the first
    time it finds the scheduler lost, and ``lost`` stays set from then on.
    """

    def __init__(self) -> None:
        self.params: np.ndarray | None = None
        self.shards: tuple[ShardFigures, ...] = ()
        self.lost: str | None = None  # SCHEDULER_LOST once the scheduler is gone
        # lock order: leaf (the scheduler-lost verdict, given once)
        self._lock = threading.Lock()

    def evaluated(self, params: np.ndarray) -> None:
        self.params = params

    def read_shards(self, shards: tuple[ShardFigures, ...]) -> None:
        self.shards = shards

    def check(self, cluster: Any, grace: float) -> str | None:
        """The line saying the scheduler is lost, the first time it is found so; else ``None``."""
        if self.lost is not None or cluster is None:
            return None
        why = cluster.lost(grace)
        if why is None:
            return None
        with self._lock:
            if self.lost is not None:
                return None
            self.lost = SCHEDULER_LOST
        return str(why)

    def final(self, initial: np.ndarray, replicas: tuple[ReplicaFigures, ...], kind: str) -> FinalState:
        """A ``FinalState`` from what was known, without asking anyone (``initial``: the parameters if
        none were ever evaluated)."""
        params = self.params if self.params is not None else initial
        info: dict[str, Any] = {"kind": kind}
        if self.lost is not None:
            info["lost"] = self.lost
        return FinalState(params.copy(), replicas, self.shards, info)
