"""Sandblaster's task entry points: a work unit and a flush, each run as a task pinned to its
replica's worker, where they find the replica's state actor and use it in process."""

from __future__ import annotations

import numpy as np

from ..nn import Network
from ..runtime.protocol import TaskSide
from ..runtime.shards import ShardHandles, connect
from .records import Assignment, Decisions, UnitResult
from .replica import SandblasterReplica


def _replica(side: TaskSide, state_key: str) -> SandblasterReplica:
    replica = side.local(state_key)
    if replica is None:
        raise RuntimeError(f"the Sandblaster replica {state_key} is not on this worker")
    return replica


def run_unit(side: TaskSide, state_key: str, shards: ShardHandles, network: Network, X: np.ndarray, y: np.ndarray,
             job: Assignment, n_total: int, vector: str, push_every: int) -> UnitResult:
    """Compute one work unit on the replica whose state actor is ``state_key``.

    It leaves the worker's task slot (Dask's ``secede``), as a Downpour replica's task does: a unit stuck on
    a shard whose machine hung (until its call times out) must not hold the only thread the restored shard's
    actor needs to start on this worker (issue #21). The dispatcher, not the pool, bounds how many run."""
    side.leave_slot()
    with side.one_blas_thread():
        return _replica(side, state_key).run_unit(connect(shards, side), side.computing(network), X, y, job,
                                                  n_total, vector, push_every, side.time)


def flush(side: TaskSide, state_key: str, shards: ShardHandles, batch: int, decisions: Decisions) -> list[int]:
    """End of batch on one replica: every unit of the batch it has pushed (see ``SandblasterReplica.flush``).

    It leaves its slot as a unit does: a flush stuck pushing to a hung shard once held a worker's only thread
    for a minute, so the restored shard's actor could not start there and the run failed."""
    side.leave_slot()
    return _replica(side, state_key).flush(connect(shards, side), batch, decisions, side.time)
