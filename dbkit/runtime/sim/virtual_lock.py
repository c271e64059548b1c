"""Waiting between simulated tasks: a lock that waits in virtual time.

A thread lock would stop the whole simulation (every task runs on the one
thread); these hand over through the loop instead.
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
