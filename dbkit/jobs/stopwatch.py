"""Seconds a job spent training: it runs while the replicas may train, not while paused."""

from __future__ import annotations

import threading
import time


class Stopwatch:
    """Runs between ``start`` and ``stop``; ``seconds`` is the total so far."""

    def __init__(self) -> None:
        self._total: float = 0.0
        self._since: float | None = None
        # lock order: leaf (the running total)
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            self._since = self._since or time.perf_counter()

    def stop(self) -> None:
        with self._lock:
            if self._since is not None:
                self._total += time.perf_counter() - self._since
                self._since = None

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._total + (time.perf_counter() - self._since if self._since else 0.0)
