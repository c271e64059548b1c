"""Waiting between simulated tasks: a lock and an event that wait in virtual time.

A thread lock or event would stop the whole simulation (every task runs on the
one thread); these hand over through the loop instead.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import greenlet

from .engine import Simulation


class VirtualLock:
    """A mutex for tasks: a task that finds it held waits, first come first served."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.held = False
        self._waiters: deque[greenlet.greenlet] = deque()

    def __enter__(self) -> VirtualLock:
        if self.held:
            self._waiters.append(greenlet.getcurrent())
            self.sim._suspend()  # woken holding it: ``__exit__`` hands it over
        self.held = True
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._waiters:
            self.sim.wake(self._waiters.popleft())
        else:
            self.held = False


class VirtualEvent:
    """``threading.Event`` for tasks: ``wait(timeout)`` waits in virtual time until ``set()`` (from a task or
    the loop: a task's end), and returns whether it was set."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._flag = False
        self._waiters: list[greenlet.greenlet] = []

    def set(self) -> None:
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for g in waiters:
            self.sim.wake(g)

    def clear(self) -> None:
        self._flag = False

    def is_set(self) -> bool:
        return self._flag

    def wait(self, timeout: float | None = None) -> bool:
        if self._flag:
            return True
        me = greenlet.getcurrent()
        self._waiters.append(me)
        if timeout is None:
            self.sim._suspend()
            return self._flag

        def expire() -> None:
            if me in self._waiters:
                self._waiters.remove(me)
                me.switch()

        cancel = self.sim.timeout(timeout, expire)
        self.sim._suspend()
        cancel()
        return self._flag
