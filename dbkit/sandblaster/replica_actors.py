"""Sandblaster's replicas on the machines: one state actor per replica, named ``sandblaster-replica-i``.

A replica's state between work units (``SandblasterReplica``: its parameters for the batch, its
accumulated gradient, its slowness) lives in an actor on its worker; the unit tasks that worker runs
find it by key. This object places those actors, retires them, changes how slow they are and asks
them for their counts, through the runtime protocol (Dask, or in process). Which units a replica does
is the dispatcher's (``UnitDispatcher``); this file only knows where the replicas are.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from ..runtime.protocol import Runtime
from ..telemetry import EventStream, ReplicaEvent
from .batch import UnitBatch
from .records import Slot
from .replica import SandblasterReplica


def actor_name(index: int) -> str:
    return f"sandblaster-replica-{index}"


class ReplicaActors:
    """Place, retire, slow and read the replicas' state actors, round-robin on ``workers``."""

    def __init__(self, cluster: Runtime, workers: list[str], events: EventStream) -> None:
        if not workers:
            raise ValueError("Sandblaster's replicas need at least one worker")
        self.cluster, self.workers, self.events = cluster, list(workers), events

    def key(self, index: int) -> str:
        """The key by which replica ``index``'s unit tasks find its state on their worker."""
        return str(self.cluster.registry.proxy(actor_name(index)).key)

    def place(self, index: int, slow: float = 1.0) -> Slot:
        """Start replica ``index``'s state actor (``slow`` times slower than it can be) and say so."""
        worker = self.workers[index % len(self.workers)]
        self.cluster.place_actor(actor_name(index), SandblasterReplica, index, slow, worker=worker)
        self.events.emit(ReplicaEvent, replica=index, what="started", worker=worker)
        return Slot(index, worker)

    def check_threads(self, slots: Iterable[Slot]) -> None:
        """Warn when replicas sharing a worker outnumber its threads: they would queue, not run at once (on
        simulated machines they do as the profile says, and no worker can be given more)."""
        if self.cluster.simulation() is not None:
            return
        nthreads = self.cluster.threads()
        wanted: dict[str, int] = {}
        for slot in slots:
            wanted[slot.worker] = wanted.get(slot.worker, 0) + 1
        short = {w: (n, nthreads.get(w, 0)) for w, n in wanted.items() if n > nthreads.get(w, 0)}
        if short:
            warnings.warn(f"replicas per worker exceed the worker's threads {short} (replicas, threads): "
                          "those replicas will wait for each other; start workers with more threads "
                          "(dask worker --nthreads)", UserWarning, stacklevel=5)

    def resize(self, batch: UnitBatch, replicas: int, slow: dict[int, float]) -> None:
        """Between batches: add replicas (new actors, new slots in ``batch``) or retire the most recent."""
        live = batch.dispatcher.live()
        if replicas > len(live):
            start = batch.next_index()
            for index in range(start, start + replicas - len(live)):
                batch.add_replica(self.place(index, slow.get(index, 1.0)), self.key(index))
        for slot in live[replicas:]:
            batch.retire_replica(slot)
            self.cluster.registry.release(actor_name(slot.index))
            self.events.emit(ReplicaEvent, replica=slot.index, what="removed", worker=slot.worker)

    def set_slow(self, slots: Iterable[Slot], slow: dict[int, float], timeout: float = 10.0) -> None:
        """Each live replica ``slow[i]`` times slower (1: as fast as it can), from its next unit on."""
        calls = [self.cluster.registry.proxy(actor_name(s.index)).set_slow(slow.get(s.index, 1.0)) for s in slots]
        for call in calls:
            call.result(timeout=timeout)

    def pushes_and_fetches(self, slots: Iterable[Slot], timeout: float = 5.0) -> dict[int, tuple[int, int]]:
        """Each replica's pushes and fetches, asked of its state actor (a lost replica has none to give)."""
        out: dict[int, tuple[int, int]] = {}
        for slot in slots:
            try:
                f = self.cluster.registry.proxy(actor_name(slot.index)).figures().result(timeout=timeout)
                out[slot.index] = (f.pushes, f.fetches)
            except Exception:  # noqa: BLE001 - a lost replica has no figures to give
                pass
        return out
