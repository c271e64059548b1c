"""Where each partitioned replica's K partitions run, and starting them wired to each other and to their
shards (DistBelief Sec. 3 inside Sec. 4.1, Fig. 2).

A Downpour replica split in K is K ``PartitionActor``s, ``replica{i}-partition{j}``, placed round-robin
over the replicas' workers. Each is connected to its K - 1 partners (the boundary activations and their
gradients go between them), given its own shards (those holding its parameters: ``aligned_layout``) and
only the input columns its first layer reads. This object owns their names; the replica's task drives
them (``PartitionedDownpourReplica``). It asks the runtime protocol only, as the shards' placement does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..data import Dataset
from ..nn import Network
from ..ps import ShardLayout, resolve
from ..runtime.places import partition_places
from ..runtime.protocol import Runtime
from ..runtime.shards import ShardHandles
from .actors import PartitionActor, wireable
from .alignment import AlignedLayout
from .ownership import Ownership
from .traffic import boundary_floats, inputs_used


@dataclass(frozen=True)
class PlacedPartitions:
    """One replica's partitions as placed: ``(key, worker)`` each, in partition order; ``wired``: they exchange
    over their own wire or in memory, and partition 0 leads each step (else: each slice is an actor call)."""

    handles: list[tuple[str, str]]
    wired: bool


ShardsOf = Callable[[list[int], ShardLayout], ShardHandles]  # handles of these shards, with this layout over them


class PartitionPlacement:
    """The partition actors of every partitioned replica of one job, by replica."""

    def __init__(self, cluster: Runtime, network: Network, ownership: Ownership, alignment: AlignedLayout,
                 workers: Callable[[], list[str]], transport: str = "socket") -> None:
        # ``workers()``: the replicas' workers now (the job's placement forgets the dead ones); ``transport``
        # "socket": partitions exchange over their own wire (or in memory) where they can, "actor": by calls
        self.cluster, self.network, self.workers, self.transport = cluster, network, workers, transport
        # lock order: a leaf (the layout and the names of each replica's partitions)
        self._lock = threading.Lock()
        self._names: dict[int, list[str]] = {}
        self._ever: set[bool] = set()  # whether each replica placed so far was wired (for the report)
        self.relayout(ownership, alignment)

    def relayout(self, ownership: Ownership, alignment: AlignedLayout) -> None:
        """Partitions placed from now on follow this ownership (the job moved its parameters to it)."""
        f = boundary_floats(ownership)
        with self._lock:
            self.ownership, self.alignment = ownership, alignment
            self.floats_per_example = f["forward"] + f["backward"]

    def workers_of(self, index: int) -> list[str]:
        """Where replica ``index``'s partitions run: round-robin over the workers, partition after
        partition. When the partitions divide the workers evenly, each wrap-around shifts by one, or
        every replica's partition 0 (and its task) would land on the same workers."""
        workers = self.workers()
        return [workers[m] for m in partition_places(index, self.alignment.partitions, len(workers))]

    def place(self, index: int, shards_of: ShardsOf, data: Dataset, rows: np.ndarray, batch_size: int, seed: int,
              overlap: bool = True) -> PlacedPartitions:
        """Start replica ``index``'s partitions, give each its shards (``shards_of``) and its columns of the
        replica's data ``rows`` (``overlap``: they fetch and push in the background); returns their
        ``(key, worker)`` in partition order, and whether they are wired to each other."""
        with self._lock:
            a, own = self.alignment, self.ownership
        where = self.workers_of(index)
        names = [f"replica{index}-partition{j}" for j in range(a.partitions)]
        with self._lock:
            self._names[index] = names
        parts = [self.cluster.place_actor(name, PartitionActor, j, own, worker=w)
                 for j, (name, w) in enumerate(zip(names, where))]
        handles = [(str(p.key), w) for p, w in zip(parts, where)]
        wires = [resolve(p.open_wire()) for p in parts] if self.transport == "socket" else None
        wired = wires is not None and wireable(wires)
        for r in [p.connect_to(handles, wires if wired else None) for p in parts]:
            resolve(r)
        X, y = data.X_train[rows], data.y_train[rows]
        calls = []
        for j, p in enumerate(parts):
            ids = list(a.shards_of[j])
            cols = inputs_used(self.network.layers[0], own.units(0, j))
            calls.append(p.attach_shards(shards_of(ids, a.partition_layout(j)), ids, X[:, cols], y, batch_size,
                                         seed, f"replica{index}/partition{j}", overlap=overlap))
        for r in calls:
            resolve(r)
        with self._lock:
            self._ever.add(wired)
        return PlacedPartitions(handles, wired)

    def boundary_exchange(self) -> str | None:
        """How the partitions placed so far exchanged boundary slices: ``"wire"`` (their own wire, or in
        memory), ``"actor"`` (a runtime call per slice), ``"mixed"``, or ``None`` (none placed)."""
        with self._lock:
            ever = set(self._ever)
        if not ever:
            return None
        return "mixed" if len(ever) > 1 else ("wire" if True in ever else "actor")

    def replicas(self) -> list[int]:
        """The replicas whose partitions are placed."""
        with self._lock:
            return list(self._names)

    def names(self) -> list[str]:
        """Every placed partition actor's name (the heartbeat pings them)."""
        with self._lock:
            return [n for ns in self._names.values() for n in ns]

    def release(self, indices: list[int], abort: str | None = None) -> None:
        """Drop the partition actors of replicas ``indices``. With ``abort`` (the replica was lost),
        each one is first told to stop waiting for its partners, so its step in progress ends now."""
        with self._lock:
            mine = [self._names.pop(i, []) for i in indices]
        names: list[str] = []
        for ns in mine:
            if abort:
                self._abort(ns, abort)
            names += ns
        self._call_each(names, "close")  # their wires and threads end now, not when Dask collects them
        self.cluster.registry.release(*names)

    def release_all(self) -> None:
        with self._lock:
            indices = list(self._names)
        self.release(indices)

    def _abort(self, names: list[str], reason: str) -> None:
        """Tell the partitions ``names`` to stop waiting for their partners; waits up to 2 s for each."""
        self._call_each(names, "abort", reason)

    def _call_each(self, names: list[str], method: str, *args: object) -> None:
        """Call ``method`` on each of the partitions ``names``, waiting up to 2 s for each (a partition on a
        dead worker is skipped)."""
        calls = []
        for name in names:
            try:
                calls.append(getattr(self.cluster.registry.proxy(name), method)(*args))
            except Exception:  # noqa: BLE001 - its worker is gone: nothing there to stop
                pass
        for call in calls:
            try:
                call.result(timeout=2)
            except Exception:  # noqa: BLE001
                pass
