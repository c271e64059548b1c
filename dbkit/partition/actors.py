"""Partitions as actors (on Dask, or in process): a ``DownpourPartition`` that finds its partners and shards by
address.

The arithmetic and the boundary messages are ``dbkit.partition.PartitionWorker``
and ``dbkit.partition.DownpourPartition``; this file adds only what needs
its worker: proxies to the partners and the shards (in process when on this
worker).
"""

from __future__ import annotations

import numpy as np

from ..runtime.shards import ShardHandles, connect
from ..runtime.task_side import task_side
from .downpour_partition import DownpourPartition


class PartitionActor(DownpourPartition):
    """One partition of a replica as a Dask actor (all methods async, on the worker's event loop)."""

    async def ping(self) -> int:
        """Answered on the worker's event loop at once: the driver's heartbeat (a hung machine answers nothing)."""
        return 0

    async def connect_to(self, partners: list[tuple[str, str]]) -> int:
        """Proxies to every partition of this replica, given as ``(key, worker address)`` in partition order."""
        side = task_side()
        return await self.connect([side.remote(PartitionActor, w, k) for k, w in partners])

    async def attach_shards(self, shards: ShardHandles, shard_ids: list[int], X: np.ndarray, y: np.ndarray,
                            batch_size: int, seed: int, name: str, overlap: bool = True) -> int:
        """Give this partition its shards (``shards.layout`` over its own block) and its data."""
        server = connect(shards, name=name, threaded=overlap)  # off the event loop: the arithmetic of shards here
        return await self.attach(server, shard_ids, X, y, batch_size, seed, worker=task_side().address,
                                 overlap=overlap)
