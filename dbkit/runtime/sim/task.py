"""A long-running task on a simulated machine: a greenlet of the simulation, and its handle.

The handle is what ``submit_on`` returns on every runtime (``TaskFuture``):
``status``, ``result(timeout)``, ``exception(timeout)``, ``cancel()``. Its waits
are in virtual time and must be made from another task. A task's error is
kept in its handle, as a Dask Future keeps it, and does not stop the simulation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import greenlet

from .engine import Simulation
from .task_side import SimTaskSide


class SimTask:
    """``fn(*args, **kwargs)`` started now as a task of ``sim``; with ``side``, ``fn`` is given its machine's
    side first (``None``: a driver's task, on no machine). ``start_after`` and ``answer_after``: the virtual
    seconds its sending and its answer take (a Dask task's two messages): it begins that much after it is
    submitted, and its handle says it ended that much after its last line."""

    def __init__(self, sim: Simulation, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 side: Callable[[SimTask], SimTaskSide] | None = None, worker: str = "",
                 on_end: Callable[[], None] | None = None, start_after: float = 0.0,
                 answer_after: float = 0.0, on_done: Callable[[SimTask], None] | None = None) -> None:
        self.sim, self.key, self.worker = sim, key, worker
        self._on_end = on_end
        self._on_done = on_done  # after every callback: the session's wake-ups (a waiter then sees what they did)
        self._status = "pending"
        self._value: Any = None
        self._error: BaseException | None = None
        self._waiters: list[greenlet.greenlet] = []
        self._callbacks: list[Callable[[SimTask], None]] = []
        self._start_after, self._answer_after = start_after, answer_after
        if side is not None:  # a task's body takes its machine's side first (``Runtime.submit_on``)
            args = (side(self), *args)
        sim.spawn(self._body, fn, args, kwargs, name=key)

    def _body(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        status, value, error = "finished", None, None
        try:
            if self._start_after > 0:
                self.sim.sleep(self._start_after)
            if self._status == "pending":  # (a task cancelled before it began never runs)
                value = fn(*args, **kwargs)
        except greenlet.GreenletExit:  # the simulation closed while it waited
            raise
        except Exception as e:  # noqa: BLE001 - the handle's, as a Future's error
            status, error = "error", e
        finally:
            if self._on_end is not None:
                self._on_end()
        if self._answer_after > 0:
            self.sim.at(self._answer_after, lambda: self._end(status, error, value))
        else:
            self._end(status, error, value)

    def add_done_callback(self, fn: Callable[[SimTask], None]) -> None:
        """Call ``fn(task)`` when the task ends (at once if it has), as a Dask Future or a
        ``concurrent.futures.Future`` would."""
        if self._status != "pending":
            fn(self)
        else:
            self._callbacks.append(fn)

    @property
    def status(self) -> str:
        return self._status

    @property
    def cancelled(self) -> bool:
        return self._status == "cancelled"

    def done(self) -> bool:
        return self._status != "pending"

    def result(self, timeout: float | None = None) -> Any:
        """The task's value once it has ended (at most ``timeout`` virtual seconds), or its error."""
        self._wait(timeout)
        if self._status == "pending":
            raise TimeoutError(f"task {self.key} did not end within {timeout:g} simulated seconds")
        if self._status == "cancelled":
            raise RuntimeError(f"task {self.key} was cancelled")  # (a lost task's error says so below)
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._error

    def cancel(self) -> bool:
        """Count the task as cancelled: it ends at its next look at whether its machine lives
        (``TaskSide.while_alive``); those waiting on it are told at once."""
        return self._end("cancelled")

    def lose(self) -> bool:
        """Its machine died: the task is ``lost`` now, as a Dask Future of a dead worker's task."""
        return self._end("lost", RuntimeError(f"task {self.key}: its simulated machine was lost"))

    def _end(self, status: str, error: BaseException | None = None, value: Any = None) -> bool:
        if self._status != "pending":
            return False
        self._status, self._error, self._value = status, error, value
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            self.sim.wake(w)
        callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)
        if self._on_done is not None:
            self._on_done(self)
        return True

    def _wait(self, timeout: float | None) -> None:
        if self._status != "pending":
            return
        me = greenlet.getcurrent()
        self._waiters.append(me)
        if timeout is None:
            self.sim._suspend()
            return

        def expire() -> None:
            if me in self._waiters:
                self._waiters.remove(me)
                me.switch()

        cancel = self.sim.timeout(max(0.0, timeout), expire)
        self.sim._suspend()
        cancel()

    def __repr__(self) -> str:
        return f"<simulated task {self.key}: {self._status}>"
