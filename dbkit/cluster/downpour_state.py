"""What the Downpour driver knows about each replica: where it runs, its future,
its latest figures and its state (running, paused, stopped, removed, failed, lost)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

LIVE = ("running", "paused")


@dataclass
class ReplicaEntry:
    index: int
    worker: str
    future: object
    state: str = "running"
    figures: dict = field(default_factory=dict)


class ReplicaBook:
    """Thread-safe book of replicas, shared by the driver and its monitor thread."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.entries: dict[int, ReplicaEntry] = {}
        self.pending_warm: list[int] = []
        self._clock = 0.0
        self._since: float | None = None

    def add(self, index: int, worker: str, future) -> None:
        with self._lock:
            self.entries[index] = ReplicaEntry(index, worker, future,
                                               figures={"replica": index, "worker": worker, "steps": 0,
                                                        "pushes": 0, "fetches": 0, "examples": 0, "failures": 0})
            if index in self.pending_warm:
                self.pending_warm.remove(index)

    def next_index(self) -> int:
        with self._lock:
            used = list(self.entries) + self.pending_warm
            return max(used) + 1 if used else 0

    def live(self) -> list[int]:
        with self._lock:
            return [i for i, e in self.entries.items() if e.state in LIVE]

    def live_count(self) -> int:
        return len(self.live()) + len(self.pending_warm)

    def update(self, index: int, figures: dict) -> None:
        with self._lock:
            e = self.entries.get(index)
            if e is None or e.state not in LIVE:
                return
            e.figures = {**e.figures, **figures}
            if figures.get("state") == "failed":
                e.state = "failed"
            elif figures.get("state") in LIVE:
                e.state = figures["state"]

    def mark_lost(self, index: int, reason: str) -> None:
        with self._lock:
            e = self.entries[index]
            if e.state in LIVE:
                e.state = "lost"
                e.figures = {**e.figures, "state": "lost", "failures": 1, "error": reason}
                try:
                    e.future.cancel()
                except Exception:
                    pass

    def settle_futures(self) -> None:
        """Take the final figures of replicas whose tasks ended (or errored) on their own."""
        with self._lock:
            entries = [e for e in self.entries.values() if e.state in LIVE]
        for e in entries:
            status = getattr(e.future, "status", "pending")
            if status == "finished":
                self._finish(e, e.future.result(), "stopped")
            elif status in ("error", "cancelled", "lost"):
                self.mark_lost(e.index, f"replica task {status}: {_exception_text(e.future)}")

    def _finish(self, e: ReplicaEntry, figures: dict, state: str) -> None:
        with self._lock:
            if e.state not in LIVE:  # someone else (driver or monitor) finished it first
                return
            e.figures = {**e.figures, **figures}
            e.state = "failed" if figures.get("state") == "failed" else state
            e.figures["state"] = e.state

    def wait(self, indices: list[int], timeout: float, state: str = "stopped") -> None:
        deadline = time.monotonic() + timeout
        for i in indices:
            e = self.entries[i]
            if e.state in LIVE:
                try:
                    figures = e.future.result(timeout=max(0.1, deadline - time.monotonic()))
                except Exception as err:  # noqa: BLE001
                    self.mark_lost(i, f"did not stop cleanly: {type(err).__name__}: {err}")
                    continue
                self._finish(e, figures, state)
            with self._lock:  # the monitor may have seen it end first (even while we waited on its
                if e.state == "stopped":  # result); it ended because we asked, so it takes our state
                    e.state = e.figures["state"] = state

    def wait_all(self, timeout: float) -> None:
        self.wait(self.live(), timeout)
        self.pending_warm.clear()

    def cancel_all(self) -> None:
        with self._lock:
            for e in self.entries.values():
                if e.state in LIVE:
                    e.state = "stopped"
                    try:
                        e.future.cancel()
                    except Exception:
                        pass
                e.future = _Done()  # drop the Future: it keeps the task's arguments (actor proxies) alive

    def worker_of(self, index: int) -> str:
        return self.entries[index].worker

    def state_of(self, index: int) -> str:
        return self.entries[index].state

    def figures(self) -> dict[int, dict]:
        with self._lock:
            return {i: {**e.figures, "state": e.state, "worker": e.worker} for i, e in self.entries.items()}

    def clock_start(self) -> None:
        with self._lock:
            if self._since is None:
                self._since = time.perf_counter()

    def clock_stop(self) -> None:
        with self._lock:
            if self._since is not None:
                self._clock += time.perf_counter() - self._since
                self._since = None

    def train_seconds(self) -> float:
        with self._lock:
            return self._clock + (time.perf_counter() - self._since if self._since is not None else 0.0)


class _Done:
    """Stands in for a released replica Future."""

    status = "released"

    def cancel(self) -> None:
        pass


def _exception_text(future) -> str:
    try:
        return repr(future.exception(timeout=1))
    except Exception as e:  # noqa: BLE001
        return type(e).__name__
