"""The gate a job's training loop passes before each unit of work: open, or closed because the
job is paused, has reached its step cap, or is stopping (then the loop unwinds with ``Stopping``)."""

from __future__ import annotations

import threading
import time
from typing import Any

from ..runtime.every import Stopping
from ..training.figures import NO_CAP

__all__ = ["Gate", "Stopping"]


class Gate:
    """Pause, step cap and stop for one training loop, and whether the loop is parked at the gate."""

    def __init__(self) -> None:
        # lock order: leaf (the gate's open flag and cap; waiters wait on it)
        self._cond = threading.Condition()
        self.paused = False
        self.cap = NO_CAP
        self.stopping = False
        self.parked = False

    def start_paused(self, paused: bool) -> None:
        """Before the loop starts: whether it starts paused (``hold`` pauses a running loop)."""
        with self._cond:
            self.paused = paused

    def open_for(self, progress: int) -> bool:
        """Called by the loop with its steps so far: True to go on; False parks it (then ``rest``)."""
        with self._cond:
            if self.stopping:
                raise Stopping()
            ok = not self.paused and progress < self.cap
            if self.parked != (not ok):
                self.parked = not ok
                self._cond.notify_all()
            return ok

    def rest(self, seconds: float = 0.05) -> None:
        """A parked loop waits here until something changes (or ``seconds`` pass)."""
        with self._cond:
            if not self.stopping:
                self._cond.wait(seconds)

    def rest_on(self, cluster: Any) -> float:
        """A parked loop waits: where the runtime's time can stand still (virtual time) it stands still, and the
        loop looks again once it moves; else here, until something changes. The seconds until it looks again."""
        if cluster is not None and cluster.holds_time:
            cluster.rest()
            return 1e-3
        self.rest()
        return 0.0

    def cap_after(self, progress: int, steps: int | None) -> int | None:
        """Let the loop go ``steps`` past ``progress`` (``None``: no cap); returns the step it stops at."""
        target = None if steps is None else progress + steps
        with self._cond:
            self.cap = NO_CAP if target is None else target
            self._cond.notify_all()
        return target

    def hold(self, paused: bool, thread: threading.Thread | None, timeout: float = 60.0, cluster: Any = None) -> None:
        """Pause (and wait until the loop is parked, or its ``thread`` has ended) or let it go on; on a
        ``cluster`` whose time stands still (virtual time), that time holds where it is instead."""
        if cluster is not None:
            cluster.hold(paused)
            if cluster.holds_time:
                thread = None
        with self._cond:
            self.paused = paused
            self._cond.notify_all()
        deadline = time.monotonic() + timeout
        while paused and thread is not None and thread.is_alive() and time.monotonic() < deadline:
            with self._cond:
                if self.parked:
                    return
                self._cond.wait(0.01)

    def stop(self) -> None:
        with self._cond:
            self.stopping = True
            self._cond.notify_all()
