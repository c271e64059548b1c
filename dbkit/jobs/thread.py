"""A job's background thread (a training loop, a monitor) that holds its job only weakly.

Between two calls of its body the thread keeps no reference to the job, so a
job nobody refers to any more (a notebook variable bound to a new job) is
garbage collected, and its finalizer stops its replicas, instead of training
on unseen.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

from .gate import Stopping


class JobThread(threading.Thread):
    """Calls ``body(job)`` until it returns ``None``; a number is seconds to wait before the next call.

    An exception other than ``Stopping`` ends the thread after ``on_error(job, error)``.
    """

    def __init__(self, job: Any, body: Callable[[Any], float | None], name: str,
                 on_error: Callable[[Any, BaseException], None] | None = None) -> None:
        super().__init__(name=name, daemon=True)
        self._job = weakref.ref(job)
        self._body, self._on_error = body, on_error
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            job = self._job()
            if job is None:
                return
            try:
                wait = self._body(job)
            except Stopping:
                return
            except BaseException as e:  # noqa: BLE001 - reported to the job, never lost
                if self._on_error is not None:
                    self._on_error(job, e)
                return
            finally:
                job = None  # hold the job only while its body runs
            if wait is None:
                return
            if wait > 0:
                self._halt.wait(wait)

    def halt(self, join: bool = True, timeout: float = 30.0) -> None:
        """End the thread after its current call (and wait for it, unless this is the thread itself)."""
        self._halt.set()
        if join and self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
