"""A job's own loop on a runtime (``Runtime.every``): its monitor, its heartbeat, a trainer's steps.

On real machines it is a thread (``EveryThread``) that holds its job only
weakly: between two calls of its body it keeps no reference to the job, so a
job nobody refers to any more (a notebook variable bound to a new job) is
garbage collected, and its finalizer stops its replicas, instead of training
on unseen. On a simulated cluster the same body runs as a task in virtual
time (``dbkit.runtime.sim.job_session``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any


class Stopping(Exception):
    """The job is stopping: its loop unwinds (and ends quietly)."""


class EveryThread(threading.Thread):
    """Calls ``body(owner)`` until it returns ``None``; a number is seconds to wait before the next call.

    An exception other than ``Stopping`` ends the thread after ``on_error(owner, error)``.
    """

    def __init__(self, owner: Any, body: Callable[[Any], float | None], name: str,
                 on_error: Callable[[Any, BaseException], None] | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self._owner = weakref.ref(owner)
        self._body, self._on_error = body, on_error
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            owner = self._owner()
            if owner is None:
                return
            try:
                wait = self._body(owner)
            except Stopping:
                return
            except BaseException as e:  # noqa: BLE001 - reported to the owner, never lost
                if self._on_error is not None:
                    self._on_error(owner, e)
                return
            finally:
                owner = None  # hold the owner only while its body runs
            if wait is None:
                return
            if wait > 0:
                self._halt.wait(wait)

    def halt(self, join: bool = True, timeout: float = 30.0) -> None:
        """End the loop after its current call (and wait for it, unless this is the thread itself)."""
        self._halt.set()
        if join and self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)


def every_thread(owner: Any, body: Callable[[Any], float | None], name: str,
                 on_error: Callable[[Any, BaseException], None] | None = None) -> EveryThread:
    """``body(owner)`` again and again on a thread of its own, started (real machines' ``Runtime.every``)."""
    thread = EveryThread(owner, body, name, on_error)
    thread.start()
    return thread
