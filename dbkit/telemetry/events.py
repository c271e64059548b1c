"""Events of a run (fetch, push with staleness and bytes, eval) and their counts."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque


class EventLog:
    """A thread-safe log of recent events plus running totals.

    Parameters
    ----------
    keep : int
        How many recent events to keep in full (older ones only count).
    """

    def __init__(self, keep: int = 10_000) -> None:
        self.start = time.perf_counter()
        self.events: deque[dict] = deque(maxlen=keep)
        self.counts: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.staleness: Counter[int] = Counter()
        self._lock = threading.Lock()

    def record(self, kind: str, **fields) -> None:
        """Record one event; ``bytes`` and ``staleness`` fields are also totalled."""
        event = {"kind": kind, "t": time.perf_counter() - self.start, **fields}
        with self._lock:
            self.events.append(event)
            self.counts[kind] += 1
            if "bytes" in fields:
                self.bytes[kind] += int(fields["bytes"])
            for s in fields.get("staleness") or ():
                if s is not None:
                    self.staleness[int(s)] += 1

    def of_kind(self, kind: str) -> list[dict]:
        with self._lock:
            return [e for e in self.events if e["kind"] == kind]

    def summary(self) -> dict:
        from ..ps import staleness_summary

        with self._lock:
            return {"counts": dict(self.counts), "bytes": dict(self.bytes),
                    "staleness": staleness_summary(self.staleness)}
