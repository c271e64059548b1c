"""Waiting between simulated tasks: a lock and a mailbox that wait in virtual time.

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


class Mailbox:
    """Messages for one task: ``put`` from anywhere, ``get`` waits until there is one."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.items: deque[Any] = deque()
        self._waiter: greenlet.greenlet | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        if self._waiter is not None:
            waiter, self._waiter = self._waiter, None
            self.sim.wake(waiter)

    def get(self) -> Any:
        while not self.items:
            self._waiter = greenlet.getcurrent()
            self.sim._suspend()
        return self.items.popleft()

    def get_within(self, seconds: float) -> Any | None:
        """The next message, waiting at most ``seconds`` of virtual time for one (``None``: none came)."""
        if not self.items:
            me = greenlet.getcurrent()
            resume = me.switch
            self._waiter = me

            def expire() -> None:
                if self._waiter is me:
                    self._waiter = None
                    resume()

            cancel = self.sim.timeout(max(0.0, seconds), expire)
            self.sim._suspend()
            cancel()  # (a no-op once it has run: its event is gone)
        return self.items.popleft() if self.items else None


class Parking:
    """Tasks waiting for their driver (a driven run's step cap reached): ``wait`` parks the calling
    task, taking no virtual time; ``release`` lets every parked task go on at the current instant."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._waiters: list[greenlet.greenlet] = []

    def wait(self) -> None:
        self._waiters.append(greenlet.getcurrent())
        self.sim._suspend()

    def release(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self.sim.at(0.0, waiter.switch)

    def __len__(self) -> int:
        return len(self._waiters)
