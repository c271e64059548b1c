"""The time a driver and a replica's loop wait in: this machine's, or a simulation's virtual seconds.

A driver polls and bounds its waits (``Fleet.wait_for``), and a replica's
loop sleeps while paused and times its steps for a straggler; each asks its
runtime's ``time`` (``Runtime.time``, ``TaskSide.time``) instead of the
``time`` module, so the same lines wait on a real clock on Dask and in
process, and in virtual time on a simulated cluster (``dbkit.runtime.sim``).
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import Protocol


class Clock(Protocol):
    """Seconds to read and to wait; ``poll``: how long a waiting loop (a paused replica's) waits before it
    looks again; ``publish_every``: how often a running replica leaves its figures for its driver."""

    poll: float
    publish_every: float

    def now(self) -> float:
        """Seconds since some fixed instant (monotonic)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...

    def wait(self, seconds: float) -> None:
        """A waiting loop's wait: at most ``seconds``, less where the runtime can tell that a message reached
        the waiter's machine (a simulated one's; on a real one, ``sleep``)."""
        ...

    def lock(self) -> AbstractContextManager:
        """A new mutex whose waits are in this clock's time (a thread lock; between simulated tasks, one
        that hands over through the simulation: a thread lock would stop it)."""
        ...

    def event(self) -> Event:
        """A new event whose ``wait`` is in this clock's time, set from any thread or task (a
        ``threading.Event``; between simulated tasks, one that wakes its waiter through the simulation)."""
        ...


class Event(Protocol):
    """What ``Clock.event`` gives: ``threading.Event``'s four methods."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class RealClock:
    """This machine's monotonic clock."""

    poll = 0.005
    publish_every = 0.01

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    def lock(self) -> AbstractContextManager:
        # lock order: the caller's (a Sandblaster replica's batch lock: a leaf, see ``BatchState``)
        return threading.Lock()

    def event(self) -> Event:
        return threading.Event()


#: the clock of every runtime whose time is real (Dask, in process)
REAL_TIME = RealClock()
