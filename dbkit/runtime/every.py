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
        halt = self._halt
        every_loop(self._owner, self._body, self._on_error, halt.is_set, lambda wait: wait > 0 and halt.wait(wait))

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


def every_loop(owner: weakref.ref, body: Callable[[Any], float | None],
               on_error: Callable[[Any, BaseException], None] | None, halted: Callable[[], bool],
               sleep: Callable[[float], Any]) -> None:
    """``body(owner())`` until it returns ``None``, raises, ``halted()`` or the owner is collected, ``sleep`` ing
    the seconds it returns between two calls (a thread's wait, or a task's in virtual time). An error other
    than ``Stopping`` is told to ``on_error(owner, error)``, never lost; the owner is held only during a call."""
    while not halted():
        held = owner()
        if held is None:
            return
        try:
            wait = body(held)
        except Stopping:
            return
        except Exception as e:  # noqa: BLE001 - reported to the owner, never lost
            if on_error is not None:
                on_error(held, e)
            return
        finally:
            held = None
        if wait is None or halted():
            return
        sleep(wait)
