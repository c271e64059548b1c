"""A wired partition's mailbox: boundary slices and partners' results, waited for on a thread.

A wired partition's step runs on a thread of its own (its partners' slices
arrive on other threads: a wire's reader, or a colocated partner's step), so
its mailbox is a dict under a condition. Every wait is bounded; ``close``
(a partner gone, the step aborted) ends every wait at once, and every later
one, with the reason.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

Letter = tuple[np.ndarray | None, dict[str, Any] | None]  # values, and the JSON that came with them


class Mailbox:
    """Messages by key, for partition ``index``; a silent partner is taken as lost after ``timeout`` s."""

    def __init__(self, index: int, timeout: float) -> None:
        self.index, self.timeout = index, float(timeout)
        # lock order: a leaf (the letters, the keys waited on and the reason it closed)
        self._cond = threading.Condition(threading.Lock())
        self._letters: dict[tuple, Letter] = {}
        self._waiting: set[tuple] = set()
        self.closed: str | None = None

    def put(self, key: tuple, values: np.ndarray | None, meta: dict[str, Any] | None = None) -> None:
        with self._cond:
            self._letters[key] = (values, meta)
            if key in self._waiting:
                self._cond.notify_all()

    def take(self, key: tuple) -> Letter:
        """The letter ``key``, waiting for it up to ``timeout`` seconds."""
        with self._cond:
            self._waiting.add(key)
            try:
                ok = self._cond.wait_for(lambda: key in self._letters or self.closed is not None, self.timeout)
            finally:
                self._waiting.discard(key)
            if key in self._letters:
                return self._letters.pop(key)
            if self.closed is not None:
                raise RuntimeError(f"partition {self.index} stopped waiting for {key[1:]}: {self.closed}")
            assert not ok
            raise TimeoutError(f"partition {self.index} waited {self.timeout:.0f}s for {key[1:]} from a partner: "
                               "is its worker alive?")

    def close(self, reason: str) -> int:
        """End every wait, now and later, with ``reason``; returns the waits ended."""
        with self._cond:
            if self.closed is None:
                self.closed = str(reason)
            waiting = len(self._waiting)
            self._cond.notify_all()
            return waiting

    def forget(self, step: int) -> None:
        """Drop letters of steps before ``step`` (a step that failed left its partners' slices behind)."""
        with self._cond:
            for key in [k for k in self._letters if k[0] < step]:
                del self._letters[key]

    def waiting(self) -> list[tuple]:
        with self._cond:
            return sorted(self._waiting, key=repr)
