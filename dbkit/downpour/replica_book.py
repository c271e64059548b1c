"""What a Downpour driver knows about each replica: where it runs, its task, its latest figures
and its state (running, paused; stopped, removed, relaid, lost, failed, diverged).

Plain Python: a replica's task is anything with ``status``, ``result(timeout)``,
``exception(timeout)`` and ``cancel()`` (a Dask Future on a cluster), so the
races between the driver and its monitor thread are tested in process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..runtime.clock import REAL_TIME, Clock
from ..training.figures import LIVE, ReplicaFigures

#: states a replica's own figures may end in (the driver decides the others)
ENDED_ON_ITS_OWN = ("failed", "diverged", "lost")


@dataclass
class ReplicaEntry:
    index: int
    worker: str
    future: Any
    figures: ReplicaFigures
    leaving: str | None = None  # told to stop: the state it ends as once its task ends

    @property
    def state(self) -> str:
        return self.figures.state

    @property
    def running(self) -> bool:
        """Its task has not been seen to end."""
        return self.figures.state in LIVE

    @property
    def live(self) -> bool:
        """Running, and not told to stop."""
        return self.running and self.leaving is None


class ReplicaBook:
    """Thread-safe book of replicas, shared by the driver and its monitor thread.

    Replicas that wait for the warm start to end are held apart (``hold_for_warm_start``) until launched.
    """

    def __init__(self) -> None:
        # lock order: after Placement._lock, before Job._lock (the entries and the replicas waiting to warm start)
        self._lock = threading.RLock()
        self.entries: dict[int, ReplicaEntry] = {}
        self._pending_warm: list[int] = []

    def add(self, index: int, worker: str, future: Any, figures: ReplicaFigures | None = None) -> None:
        """Replica ``index``'s task, launched on ``worker``; its figures until it publishes its own
        (``figures``: with the settings it was launched with)."""
        with self._lock:
            first = (figures or ReplicaFigures(index)).but(worker=worker)
            self.entries[index] = ReplicaEntry(index, worker, future, first)
            if index in self._pending_warm:
                self._pending_warm.remove(index)

    def hold_for_warm_start(self, indices: list[int]) -> None:
        """Replicas ``indices`` wait for the warm start to end (they count as live, with no task yet)."""
        with self._lock:
            self._pending_warm = list(indices)

    def waiting_for_warm_start(self) -> list[int]:
        with self._lock:
            return list(self._pending_warm)

    def drop_waiting(self, k: int) -> list[int]:
        """Take up to ``k`` replicas, the most recent first, off those waiting for the warm start."""
        with self._lock:
            gone = self._pending_warm[len(self._pending_warm) - min(k, len(self._pending_warm)):][::-1]
            del self._pending_warm[len(self._pending_warm) - len(gone):]
            return gone

    def next_index(self) -> int:
        with self._lock:
            used = list(self.entries) + self._pending_warm
            return max(used) + 1 if used else 0

    def live(self) -> list[int]:
        with self._lock:
            return sorted(i for i, e in self.entries.items() if e.live)

    def running(self) -> list[int]:
        """Replicas whose tasks have not been seen to end (the live ones, and those told to stop)."""
        with self._lock:
            return sorted(i for i, e in self.entries.items() if e.running)

    def live_count(self) -> int:
        with self._lock:
            return len(self.live()) + len(self._pending_warm)

    def update(self, index: int, figures: ReplicaFigures) -> None:
        """Take a live replica's newest figures; a replica that says it failed, diverged or was lost has ended."""
        with self._lock:
            e = self.entries.get(index)
            if e is not None and e.running and (figures.state in LIVE or figures.state in ENDED_ON_ITS_OWN):
                e.figures = figures.but(worker=e.worker)

    def mark_lost(self, index: int, reason: str) -> None:
        with self._lock:
            e = self.entries[index]
            if e.running:
                e.figures = e.figures.but(state="lost", failures=1, error=reason)
                try:
                    e.future.cancel()
                except Exception:  # noqa: BLE001 - the client may be gone already
                    pass

    def lost_with(self, index: int, worker: str) -> None:
        """Replica ``index``, which ended ``failed`` on a call to ``worker``, is known now to have been lost with
        that machine: it ends ``lost`` (the machine's loss, not a fault of its own)."""
        with self._lock:
            e = self.entries[index]
            if e.figures.state == "failed":
                e.figures = e.figures.but(state="lost", error=f"{e.figures.error} (worker {worker} lost)")

    def lost_with_dead_workers(self, alive: set[str]) -> list[int]:
        """The replicas that ended lost, or failed, while their worker or a partition's is not in ``alive``,
        each now counted as lost with it (its task, or its loop, may have failed on the dead connection
        before the worker was reported gone: it then ends ``lost`` too)."""
        lost = []
        with self._lock:
            for i, f in self.figures().items():
                gone = sorted(({self.worker_of(i)} | {p.worker for p in f.partitions if p.worker}) - alive)
                if f.state in ("lost", "failed") and gone:
                    self.lost_with(i, gone[0])
                    lost.append(i)
        return lost

    def check_partitions(self, alive: set[str]) -> None:
        """A partitioned replica is lost as soon as a worker holding one of its partitions is gone
        from ``alive`` (its own task could otherwise wait on the dead partition until the
        connection attempts time out)."""
        with self._lock:
            figures = self.figures()
            for index in self.live():
                gone = sorted(w for w in {p.worker for p in figures[index].partitions} if w and w not in alive)
                if gone:
                    self.mark_lost(index, f"worker {gone[0]} holding a partition of replica {index} lost")

    def leave(self, indices: list[int], state: str) -> None:
        """Replicas ``indices`` were told to stop: no longer live, they end as ``state`` once their tasks end
        (``wait``, or the next ``settle_futures``)."""
        with self._lock:
            for i in indices:
                e = self.entries.get(i)
                if e is not None and e.running:
                    e.leaving = state

    def settle_futures(self) -> None:
        """Take the final figures of replicas whose tasks ended (or errored) on their own."""
        with self._lock:
            entries = [e for e in self.entries.values() if e.running]
        for e in entries:
            status = getattr(e.future, "status", "pending")
            if status == "finished":
                self._finish(e, e.future.result(), e.leaving or "stopped")
            elif status in ("error", "cancelled", "lost"):
                self.mark_lost(e.index, f"replica task {status}: {_exception_text(e.future)}")

    def _finish(self, e: ReplicaEntry, figures: ReplicaFigures, state: str) -> None:
        with self._lock:
            if not e.running:  # someone else (driver or monitor) finished it first
                return
            own = figures.state if figures.state in ENDED_ON_ITS_OWN else state
            e.figures = figures.but(worker=e.worker, state=own)

    def wait(self, indices: list[int], timeout: float, state: str = "stopped", clock: Clock = REAL_TIME,
             refresh: Callable[[], None] | None = None) -> None:
        """Wait for the tasks of ``indices`` to end (they were told to stop), at most ``timeout`` seconds of
        ``clock`` in all; they take ``state``. With ``refresh`` (a poll of the replicas' figures), a replica
        whose figures say it ended meanwhile is not waited for: one whose step hung, given up on by its
        loop (``step_watch``), ends the wait at once rather than at the timeout."""
        deadline = clock.now() + timeout
        for i in indices:
            e = self.entries[i]
            while e.running:
                rest = deadline - clock.now()
                try:
                    figures = e.future.result(timeout=max(0.1, min(rest, 0.25) if refresh else rest))
                except TimeoutError as err:
                    if refresh is not None and clock.now() < deadline:
                        refresh()  # its figures may say it failed: then it is not running, and not waited for
                        continue
                    self.mark_lost(i, f"did not stop cleanly: {type(err).__name__}: {err}")
                    break
                except Exception as err:  # noqa: BLE001
                    self.mark_lost(i, f"did not stop cleanly: {type(err).__name__}: {err}")
                    break
                self._finish(e, figures, state)
            with self._lock:  # the monitor may have seen it end first (even while we waited on its
                if e.state == "stopped":  # result); it ended because we asked, so it takes our state
                    e.figures = e.figures.but(state=state)

    def wait_all(self, timeout: float, clock: Clock = REAL_TIME, refresh: Callable[[], None] | None = None) -> None:
        with self._lock:
            running = sorted(i for i, e in self.entries.items() if e.running)
        self.wait(running, timeout, clock=clock, refresh=refresh)
        with self._lock:
            self._pending_warm.clear()

    def cancel_all(self) -> None:
        """Cancel every task still running and forget every task's Future."""
        with self._lock:
            for e in self.entries.values():
                if e.running:
                    e.figures = e.figures.but(state="stopped")
                    try:
                        e.future.cancel()
                    except Exception:  # noqa: BLE001
                        pass
                e.future = _Released()  # a Future keeps its task's arguments alive

    def worker_of(self, index: int) -> str:
        return self.entries[index].worker

    def state_of(self, index: int) -> str:
        return self.entries[index].state

    def figures(self) -> dict[int, ReplicaFigures]:
        """Each replica's latest figures; one told to stop says how it will end (it counts as gone at once)."""
        with self._lock:
            return {i: e.figures.but(state=e.leaving) if e.running and e.leaving else e.figures
                    for i, e in sorted(self.entries.items())}

    def total_steps(self) -> int:
        with self._lock:
            return sum(e.figures.steps for e in self.entries.values())


class _Released:
    """Stands in for a released replica Future."""

    status = "released"

    def cancel(self) -> None:
        pass


def _exception_text(future) -> str:
    try:
        return repr(future.exception(timeout=1))
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
