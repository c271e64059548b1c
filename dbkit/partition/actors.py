"""Partitions as actors (on Dask, or in process): a ``DownpourPartition`` that finds its partners and shards by
address.

The arithmetic and the boundary messages are ``dbkit.partition.PartitionWorker``
and ``dbkit.partition.DownpourPartition``; this file adds only what needs
its worker: proxies to the partners and the shards (in process when on this
worker), and a wired partition's listener on the worker's own interface.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from urllib.parse import urlparse

import numpy as np

from ..ps.records import WireAddress
from ..runtime.protocol import TaskSide
from ..runtime.shards import ShardHandles, connect
from .boundary_link import End, InMemoryEnd
from .boundary_wire import BoundaryEnd
from .downpour_partition import DownpourPartition
from .lead import lead
from .ownership import Ownership


@dataclass(frozen=True)
class BoundaryAddress:
    """Where a wired partition listens (``wire`` is ``None`` off plain TCP: in process, or under TLS, where
    only partners in its own ``process`` can reach it)."""

    wire: WireAddress | None
    process: str


def wireable(addresses: list[BoundaryAddress | None]) -> bool:
    """Whether partitions at ``addresses`` can all reach each other without their runtime's calls: each one
    listens on a wire, or all live in one process."""
    if any(a is None for a in addresses):
        return False
    return all(a.wire is not None for a in addresses) or len({a.process for a in addresses}) == 1  # type: ignore[union-attr]


class PartitionActor(DownpourPartition):
    """One partition of a replica as an actor (all methods async, on its worker's event loop), given the side
    of the worker it lives on (``side``: its address, the actors beside it)."""

    takes_side = True

    def __init__(self, index: int, ownership: Ownership, side: TaskSide, exchange_timeout: float = 120.0) -> None:
        super().__init__(index, ownership, exchange_timeout)
        self.side = side

    async def ping(self) -> int:
        """Answered on the worker's event loop at once: the driver's heartbeat (a hung machine answers nothing)."""
        return 0

    async def open_wire(self) -> BoundaryAddress:
        """Wire this partition (``PartitionWorker.wire_up``): listen on the worker's interface if it speaks
        plain TCP (never under TLS, where Dask's encrypted comms carry the slices)."""
        url = urlparse(self.side.address)
        host = url.hostname if url.scheme == "tcp" and url.hostname else None
        return BoundaryAddress(self.wire_up(host), f"{socket.gethostname()}:{os.getpid()}")

    async def connect_to(self, partners: list[tuple[str, str]], wires: list[BoundaryAddress] | None = None) -> int:
        """Proxies to every partition of this replica, given as ``(key, worker address)`` in partition order;
        with ``wires`` (each one's ``open_wire``), ends to them instead: in memory where a partner is in this
        process, else over its wire."""
        side = self.side
        if wires is None:
            return await self.connect([side.remote(PartitionActor, w, k) for k, w in partners])
        ends: dict[int, End] = {}
        for j, ((key, worker), address) in enumerate(zip(partners, wires)):
            if j == self.index:
                continue
            partner = side.same_process(worker, key)
            if partner is not None and partner.link is not None:
                ends[j] = InMemoryEnd(partner.link, self.index)
            elif address.wire is not None:
                ends[j] = BoundaryEnd(address.wire, self.index)
            else:
                raise RuntimeError(f"partition {j} of {self.k} ({key}) is neither in this process nor on a wire")
        return self.connect_ends(ends)

    async def lead_run(self, step: int, return_grad: bool = True) -> list[tuple[dict, np.ndarray | None]]:
        """One forward and backward pass on every partition, started by this one (a wired partition 0) with one
        message to each partner: each partition's result and gradient, in partition order."""
        return await asyncio.get_running_loop().run_in_executor(self._thread(), lead, self, step, "run",
                                                                {"return_grad": return_grad})

    async def close(self) -> int:
        """Close this partition's wire and let its thread end (before its actor is released)."""
        self.shutdown()
        return 0

    async def attach_shards(self, shards: ShardHandles, shard_ids: list[int], X: np.ndarray, y: np.ndarray,
                            batch_size: int, seed: int, name: str, overlap: bool = True) -> int:
        """Give this partition its shards (``shards.layout`` over its own block) and its data."""
        side = self.side
        server = connect(shards, side, name=name, threaded=overlap)  # off the event loop: shards here compute
        return await self.attach(server, shard_ids, X, y, batch_size, seed, worker=side.address, overlap=overlap)
