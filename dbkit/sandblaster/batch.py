"""One Sandblaster batch gradient: the dispatcher's assignments sent as tasks to replicas, on any runtime.

``UnitBatch(vector)`` returns the batch loss at shard vector ``vector`` and
leaves the gradient in shard vector ``"acc"``: the executor that
``LBFGSCoordinator`` calls. The rules (who gets which unit, backups, winners,
redo after a loss) are ``dbkit.sandblaster.UnitDispatcher``'s; this file only
submits tasks, waits on their futures and notices lost workers, through the
runtime protocol (``dbkit.runtime.protocol.Runtime``: Dask, or in process).
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError
from typing import Any

import numpy as np

from ..jobs import Gate, Stopping
from ..nn import Network
from ..ps import ShardedParameters
from ..runtime.bounded_wait import WorkerLeft, wait_unless_gone
from ..runtime.protocol import Runtime
from ..runtime.shards import handles_of
from .dispatcher import UnitDispatcher
from .records import Slot
from .tasks import flush, run_unit
from .work_units import make_units


class UnitBatch:
    """Batch gradients by work units on the replicas ``slots`` (each with its state actor's key).

    ``lock`` is held for a whole batch: a change of units, flags or replicas
    waits for the batch in progress. ``on_batch(dispatcher, seconds)`` (a
    method, held weakly) is called after each batch; ``clock`` times the
    units on its timeline. Its batches are timed and its waits bounded on the runtime's clock (virtual seconds
    on a simulated cluster).
    """

    def __init__(self, cluster: Runtime, network: Network, X: np.ndarray, y: np.ndarray, server: ShardedParameters,
                 slots: list[Slot], state_keys: dict[int, str], unit_size: int, push_every: int, backup: bool,
                 balance: bool, gate: Gate, on_batch: Callable[[UnitDispatcher, float], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.cluster, self.network, self.server, self.gate = cluster, network, server, gate
        self.X, self.y = X, y
        self.state_keys = state_keys
        self.push_every = push_every
        self.dispatcher = UnitDispatcher(slots, make_units(len(y), unit_size), backup, balance, clock)
        self.handles = handles_of(server)
        # held weakly: the job owns this batch, and its finalizer must not keep the job alive
        self._on_batch = weakref.WeakMethod(on_batch) if on_batch is not None else None
        # lock order: after Job._steer, before the event stream's (held for a whole batch; a change waits for its end)
        self.lock = threading.RLock()
        self.batch_seconds: list[float] = []
        self._data: dict[str, tuple[Any, Any]] = {}
        self._futures: dict[int, Any] = {}  # replica -> its unit task in flight
        self._done: deque[tuple[int, int, Any]] = deque()  # (sent as, replica, task) of unit tasks that ended
        self._sequence = itertools.count()
        self._bell = cluster.time.event()  # rung as a unit task ends
        for slot in slots:
            self.data_on(slot.worker)

    def data_on(self, worker: str) -> tuple[Any, Any]:
        """The batch's examples, scattered once to ``worker``."""
        if worker not in self._data:
            self._data[worker] = (self.cluster.put(self.X, worker), self.cluster.put(self.y, worker))
        return self._data[worker]

    def add_replica(self, slot: Slot, state_key: str) -> None:
        """Take a new replica (its slot and the key of its state actor) from the next batch on; its worker
        gets the data now."""
        with self.lock:
            self.state_keys[slot.index] = state_key
            self.data_on(slot.worker)
            self.dispatcher.add(slot)

    def retire_replica(self, slot: Slot) -> None:
        """Give replica ``slot`` no units from the next batch on."""
        with self.lock:
            self.dispatcher.retire(slot)

    def next_index(self) -> int:
        """The number a new replica takes: one more than any replica this batch has known."""
        return max(s.index for s in self.dispatcher.slots) + 1

    def set_unit_size(self, unit_size: int) -> None:
        with self.lock:
            self.dispatcher.between_batches(units=make_units(len(self.y), unit_size))

    def __call__(self, vector: str) -> float:
        with self.lock:
            start = self.cluster.time.now()
            d = self.dispatcher
            d.begin()
            self.server.zero("acc")
            while True:
                self._run_units(vector)
                if self._flush():
                    break
            seconds = self.cluster.time.now() - start
            self.batch_seconds.append(seconds)
            callback = self._on_batch() if self._on_batch is not None else None
            if callback is not None:
                callback(d, seconds)
            return d.loss

    def _landed(self) -> list[set[int]]:
        return self.server.landed("acc")

    def _run_units(self, vector: str) -> None:
        d, clock = self.dispatcher, self.cluster.time
        last_check = clock.now()
        while not d.complete:
            if self.gate.stopping:
                raise Stopping()
            for slot, job in d.assign_free():
                X, y = self.data_on(slot.worker)
                f = self._futures[slot.index] = self.cluster.submit_on(
                    slot.worker, run_unit, self.state_keys[slot.index], self.handles, self.network, X, y, job,
                    len(self.y), vector, self.push_every,
                    key=f"dbkit-unit-{d.batch}-{job.unit.index}-replica-{slot.index}-{self.cluster.tag}-"
                        f"{time.perf_counter_ns()}")
                f.add_done_callback(functools.partial(self._ended, next(self._sequence), slot.index))
            waited = bool(self._futures) and not self._done
            if waited:  # until a unit task's callback rings (a wait on every future cost O(replicas) a unit)
                self._bell.wait(0.05)
            self._bell.clear()
            ended = self._drain()
            if waited and not ended:  # a callback may come after the wait, on another thread; a lost Dask
                # future's status changes with none: look at each (on a simulated cluster: a wait that timed out)
                ended = [(index, f) for index, f in self._futures.items() if f.status != "pending"]
            for index, f in ended:
                self._settle(index, f)
            if clock.now() - last_check > 0.25:
                last_check = clock.now()
                self._check_workers()

    def _ended(self, sequence: int, index: int, future: Any) -> None:
        """A unit's task ended (called by its runtime, on any thread): ``_run_units`` reads it next."""
        self._done.append((sequence, index, future))
        self._bell.set()

    def _drain(self) -> list[tuple[int, Any]]:
        """The unit tasks that ended since the last look and are still this batch's, in the order they were
        sent (the order a scan of ``_futures`` gave: a simulated run's report does not change)."""
        ended = []
        while self._done:
            ended.append(self._done.popleft())
        ended.sort(key=lambda e: e[0])
        return [(index, f) for _, index, f in ended if self._futures.get(index) is f]

    def _settle(self, index: int, f: Any) -> None:
        """Tell the dispatcher how replica ``index``'s unit task ``f`` ended: a result, or a lost replica."""
        d = self.dispatcher
        del self._futures[index]
        slot = d.slot(index)
        if f.status != "finished":
            if f.status == "error" and slot.worker in self.cluster.workers():
                raise RuntimeError(f"work unit on replica {slot.index} failed: {f.exception()!r}")
            d.lose(slot, f"its work unit was {f.status} (worker {slot.worker} lost)", self._landed)
            return
        try:
            result = self._read(f, slot.worker)
        except CancelledError:  # read as finished, then released: its worker died in between
            d.lose(slot, f"its work unit's result was lost with worker {slot.worker}", self._landed)
            return
        d.finished(slot, result)

    def _read(self, future, worker: str):  # noqa: ANN001, ANN202 - a finished task's future, its result
        """The result of a finished task held on ``worker``; ``CancelledError`` if ``worker`` leaves the
        cluster meanwhile. Reading it fetches it from ``worker``: from a stopped machine (SIGSTOP) that
        waits for ever, and after the heartbeat drops the worker, for the connect timeouts (a test run
        once spent 60 s past its budget there)."""
        try:
            return wait_unless_gone(future.result, None, lambda: worker not in self.cluster.workers())
        except WorkerLeft:
            raise CancelledError(f"worker {worker} left the cluster holding the result") from None

    def _check_workers(self, during: str = "the batch") -> None:
        """Lose the replicas whose workers left the cluster (or were dropped as hung), then, if a shard's worker
        left, end ``during`` (``RuntimeError``: the job brings the shard back from its checkpoint). The
        replicas first: a worker holding both a shard and a replica is counted as both (#48: a stopped
        worker's replica was not counted lost, and came back to a restored job as if nothing happened)."""
        alive = set(self.cluster.workers())
        gone = sorted({w for w in self.server.workers if w not in alive})
        for slot in self.dispatcher.live():
            if slot.worker not in alive:
                self._futures.pop(slot.index, None)
                self.dispatcher.lose(slot, f"worker {slot.worker} left the cluster", self._landed)
        if gone:  # a shard went with its worker (or was dropped as hung): the batch cannot complete
            raise RuntimeError(f"parameter shard's worker {gone[0]} left the cluster during {during}")

    def _flush(self) -> bool:
        """Push every live replica's committed units; False if a replica was lost meanwhile (redo)."""
        d = self.dispatcher
        self._check_workers()
        futures = {i: self.cluster.submit_on(
            self.dispatcher.slot(i).worker, flush, self.state_keys[i], self.handles, d.batch, decisions,
            key=f"dbkit-flush-{d.batch}-replica-{i}-{self.cluster.tag}-{time.perf_counter_ns()}")
            for i, decisions in d.flush_orders().items()}
        clock = self.cluster.time
        deadline = clock.now() + 60
        ok = True
        for index, f in futures.items():
            slot = self.dispatcher.slot(index)
            while f.status == "pending" and clock.now() < deadline:
                self.cluster.wait([f], timeout=0.25)
                if slot.worker not in self.cluster.workers():
                    break
                if any(w not in self.cluster.workers() for w in self.server.workers):  # a flush pushing to a
                    self._check_workers("the flush")  # hung shard waits for it: restore now, not at the wake-up
            status, pushed = f.status, None
            if status == "finished":
                try:
                    pushed = self._read(f, slot.worker)
                except CancelledError:  # its worker died after the push was read as done
                    status = "cancelled"
            ok = d.flushed(slot, pushed, status, self._landed) and ok
        return ok and d.complete

    def abandon(self, server: ShardedParameters) -> None:
        """Drop the batch under way (a shard was lost: it is redone) and use ``server`` from now on.
        Its unit tasks still running hold the old shards' handles, so nothing they push reaches
        ``server``; the replicas drop their old batch at their next unit."""
        with self.lock:
            for f in self._futures.values():
                try:
                    f.cancel()
                except Exception:  # noqa: BLE001 - a future of a lost worker may be gone already
                    pass
            self._futures = {}
            self._done.clear()
            self.dispatcher.forget_in_flight()
            self.server, self.handles = server, handles_of(server)

    def release(self) -> None:
        """Forget the shards, the scattered data and the futures (they would keep actors and data alive)."""
        self._data, self._futures = {}, {}
        self._done.clear()
        self.server = None  # type: ignore[assignment]
