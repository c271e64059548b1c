"""Partitions of a replica in virtual time (DistBelief Sec. 3): the real ``DownpourPartition``,
on a simulated machine.

A partition's forward and backward, its boundary slices and its own shards
are ``DownpourPartition``'s; three seams of ``PartitionWorker`` are answered
here instead of on an event loop: ``_compute`` runs a layer part and holds a
core for the modelled seconds, ``_post`` puts a boundary slice on the network
(both NICs, the latency) and ``_take`` waits in virtual time for a partner's.
``SimulatedPartitionActor`` is what a simulated session places where a job's
``PartitionPlacement`` asks for a ``PartitionActor``; each call to it runs in a
task of its own on its machine (``dbkit.runtime.sim.actor_in_tasks``), so
partitions wait for each other as they would on separate machines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import greenlet
import numpy as np

from ..runtime.protocol import TaskSide
from ..runtime.shards import ShardHandles, connect
from ..runtime.sim.compute import TimedNetwork
from ..runtime.sim.cost import CostModel
from ..runtime.sim.engine import Simulation
from ..runtime.sim.job_session import STAND_INS
from ..runtime.sim.machines import Machine, Network
from ..runtime.sim.shape import LayerShape, layer_shape
from . import Ownership
from .actors import PartitionActor
from .downpour_partition import DownpourPartition


class SimulatedPartition(DownpourPartition):
    """Partition ``index`` of ``ownership.k``, on ``machine``; ``timed`` holds its cores (and its ``slow``)."""

    def __init__(self, index: int, ownership: Ownership, sim: Simulation, machine: Machine, network: Network,
                 cost: CostModel, threads: int = 1) -> None:
        super().__init__(index, ownership)
        self.sim, self.machine, self.links, self.cost = sim, machine, network, cost
        self.timed = TimedNetwork(ownership.network, sim, machine, cost, threads=threads)
        self._waiting: dict[tuple, greenlet.greenlet] = {}
        self._arrived: dict[tuple, np.ndarray] = {}  # slices delivered, by key
        self._shapes: dict[int, LayerShape] = {}

    async def _compute(self, fn, *args):
        """A layer part's arithmetic, then a core held for its modelled seconds (and the partition's own
        vector work on its parameters, once a step, after its last backward)."""
        self._check_aborted()
        out = fn(*args)
        layer = fn.__self__
        shape = self._shapes.get(id(layer))
        if shape is None:
            shape = self._shapes[id(layer)] = layer_shape(layer)
        name = fn.__name__
        batch = args[1].shape[0] if name == "forward" else args[2].shape[0]
        passes = 1.0 if name in ("forward", "input_grad") else 1.0 + float(bool(args[3]) if len(args) > 3 else 1)
        serial, parallel = self.cost.layer_parts(shape, batch, passes)
        self.timed.hold(parallel, serial)
        return out

    async def _take(self, key: tuple) -> np.ndarray:
        self._check_aborted()
        if key not in self._arrived:
            self._waiting[key] = greenlet.getcurrent()
            self.sim._suspend()
            self._check_aborted()
        return self._arrived.pop(key)

    def _post(self, to: int, key: tuple, values: np.ndarray) -> None:
        partner: SimulatedPartition = self.partners[to]
        sim, now = self.sim, self.sim.now
        if partner.machine is self.machine:
            arrival = now + self.links.local_latency
        else:
            nbytes = values.nbytes + self.cost.profile.message.header_bytes
            cpu = self.cost.message_cpu(nbytes)
            sent = self.machine.reserve(now, cpu)
            self.links.send(sim, sent, self.machine, partner.machine, nbytes, lambda: partner.deliver(key, values),
                            extra=self.cost.profile.message.partition_message_seconds)
            return
        if arrival <= now:
            partner.deliver(key, values)
        else:
            sim.at(arrival - now, lambda: partner.deliver(key, values))

    def deliver(self, key: tuple, values: np.ndarray) -> None:
        """A partner's slice has arrived: into the mailbox, and wake the step waiting for it."""
        self._arrived[key] = values
        waiter = self._waiting.pop(key, None)
        if waiter is not None:
            self.sim.wake(waiter)

    async def abort(self, reason: str) -> int:
        """As a real partition's: its waits end at once (each raises), and every later one too."""
        ended = await super().abort(reason)
        waiting, self._waiting = list(self._waiting.values()), {}
        for waiter in waiting:
            self.sim.wake(waiter)
        return ended + len(waiting)


class SimulatedPartitionActor(SimulatedPartition):
    """A ``PartitionActor`` on a simulated machine (what a simulated session places for one): found by its
    partners through ``find(key)`` (the partition itself, so that a boundary slice is timed on the network,
    ``_post``) and reaching its shards from its machine (``connect`` in a task there)."""

    def __init__(self, index: int, ownership: Ownership, sim: Simulation, machine: Machine, network: Network,
                 cost: CostModel, find: Callable[[str], SimulatedPartition], side: TaskSide,
                 threads: int = 1) -> None:
        super().__init__(index, ownership, sim, machine, network, cost, threads=threads)
        self._find, self.side = find, side

    async def ping(self) -> int:
        return 0

    async def open_wire(self) -> None:
        """No wire: a simulated partition's slices go on the simulated network (``_post``), and its replica
        calls each partition per step, as it does a real one over ``--transport actor``."""
        return None

    async def connect_to(self, partners: list[tuple[str, str]], wires: list | None = None) -> int:
        return await self.connect([self._find(key) for key, _ in partners])

    async def close(self) -> int:
        return 0

    async def attach_shards(self, shards: ShardHandles, shard_ids: list[int], X: np.ndarray, y: np.ndarray,
                            batch_size: int, seed: int, name: str, overlap: bool = True) -> int:
        server = connect(shards, self.side, name=name)
        return await self.attach(server, shard_ids, X, y, batch_size, seed, worker=self.machine.name, overlap=overlap)


def _stand_in(session: Any, machine: Machine, index: int, ownership: Ownership,
              side: TaskSide) -> SimulatedPartitionActor:
    """What a simulated session places for a ``PartitionActor``: the real partition, timed on ``machine``."""
    return SimulatedPartitionActor(index, ownership, session.sim, machine, session.layout.network, session.cost,
                                   session.actor, side, threads=session.threads_per_task)


STAND_INS[PartitionActor] = _stand_in
