"""An actor partition's mailbox on its event loop: boundary slices by key, each waited for without a thread.

A partition that is not wired (``--transport actor``, or TLS) receives each
slice as an actor call (``PartitionWorker.receive``) on its worker's event
loop, where its step's coroutine waits for it: a dict of letters and an
``asyncio.Event`` per key. A wired partition's mailbox is ``mailbox.Mailbox``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np


class EventBox:
    """Letters by key and the events their waiters sleep on (one event loop's: no lock)."""

    def __init__(self, index: int, timeout: float) -> None:
        self.index, self.timeout = index, float(timeout)
        self._letters: dict[tuple, np.ndarray] = {}
        self._events: dict[tuple, asyncio.Event] = {}

    def put(self, key: tuple, values: np.ndarray) -> None:
        self._letters[key] = values
        self._events.setdefault(key, asyncio.Event()).set()

    async def take(self, key: tuple, check: Callable[[], None]) -> np.ndarray:
        """The letter ``key``, waiting up to ``timeout`` seconds; ``check()`` raises if the wait was ended by
        ``wake_all`` (the partition was aborted)."""
        event = self._events.setdefault(key, asyncio.Event())
        try:
            await asyncio.wait_for(event.wait(), self.timeout)
        except asyncio.TimeoutError:
            self._events.pop(key, None)
            raise TimeoutError(f"partition {self.index} waited {self.timeout:.0f}s for {key[1:]} from a "
                               "partner: is its worker alive?") from None
        del self._events[key]
        if key not in self._letters:  # woken by wake_all, not by a message
            check()
        return self._letters.pop(key)

    def wake_all(self) -> int:
        """End every wait in progress; returns how many."""
        waiting = [e for e in self._events.values() if not e.is_set()]
        for event in waiting:
            event.set()
        return len(waiting)

    def waiting(self) -> list[tuple]:
        return [key for key, event in self._events.items() if not event.is_set()]
