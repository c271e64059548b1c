"""A replica loop's step held to a bound (issue #48): a ``step()`` that does not return within the job's
``heartbeat_timeout`` ends its replica as ``failed`` with "step() did not return within N s", so that the job
goes on without it and stops on time with its report. Python cannot end a thread from outside, so the step
itself runs on; its replica is abandoned (whatever it does after is not published) and its task ends with its
process. Real time only: in virtual time a step that never returns holds the simulation itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..runtime.given_up import give_up
from ..training.figures import ReplicaFigures


class StepWatch:
    """Watches one replica loop's steps from a thread of its own; ``abandoned`` once a step overran.

    ``fail(error)`` publishes the replica's final figures as failed (the loop's own ``publish``); the loop
    calls ``began()`` before each step, ``ended()`` after it, and ``close()`` when it ends. Its state is its
    own and under its lock (lock order: alone; ``fail`` is called outside it).
    """

    def __init__(self, fail: Callable[[str], ReplicaFigures], name: str) -> None:
        self._fail = fail
        # lock order: a leaf (the watch's own state; publishing happens outside it)
        self._lock = threading.Lock()
        self._stepping_since: float | None = None
        self._timeout = 0.0
        self.gave_up = False  # set before the failure is published: a step returning then publishes nothing
        self.abandoned: ReplicaFigures | None = None  # the figures published when it gave up on the step
        self._closed = threading.Event()
        self._stepper = threading.current_thread()  # the loop's: given up on with its step
        self._thread = threading.Thread(target=self._watch, name=f"dbkit-step-watch-{name}", daemon=True)
        self._thread.start()

    def began(self, timeout: float) -> None:
        """A step begins, bounded by ``timeout`` seconds (0: none)."""
        with self._lock:
            self._stepping_since, self._timeout = time.monotonic(), float(timeout)

    def ended(self) -> bool:
        """The step returned; False if it had been given up on (the loop must end without publishing)."""
        with self._lock:
            self._stepping_since = None
            return not self.gave_up

    def close(self) -> None:
        self._closed.set()

    def _overran(self) -> float | None:
        with self._lock:
            since, timeout = self._stepping_since, self._timeout
            if since is None or timeout <= 0 or self.gave_up or time.monotonic() - since <= timeout:
                return None
            self.gave_up = True
            return timeout

    def _watch(self) -> None:
        while not self._closed.wait(0.25):
            timeout = self._overran()
            if timeout is not None:
                give_up(self._stepper)
                self.abandoned = self._fail(f"step() did not return within {timeout:g} s (the job's "
                                            "heartbeat_timeout): the replica is given up on; the job goes on "
                                            "without it")
                return
