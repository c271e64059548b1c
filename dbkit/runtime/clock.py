"""The time a driver and a replica's loop wait in: this machine's, or a simulation's virtual seconds.

A driver polls and bounds its waits (``Fleet.wait_for``), and a replica's
loop sleeps while paused and times its steps for a straggler; each asks its
runtime's ``time`` (``Runtime.time``, ``TaskSide.time``) instead of the
``time`` module, so the same lines wait on a real clock on Dask and in
process, and in virtual time on a simulated cluster (``dbkit.runtime.sim``).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds to read and to wait."""

    def now(self) -> float:
        """Seconds since some fixed instant (monotonic)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class RealClock:
    """This machine's monotonic clock."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


#: the clock of every runtime whose time is real (Dask, in process)
REAL_TIME = RealClock()
