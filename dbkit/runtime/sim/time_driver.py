"""The thread that runs a simulated session's virtual time, and hands it the job's calls.

A job on a simulated cluster is the job itself (``DownpourSGD``), its drivers
calling the runtime as on Dask; the simulation's tasks are greenlets of one
thread, so everything that touches the simulation happens on that thread.
``call(fn)`` runs ``fn`` there, as a task on the driver's machine, at the current
virtual instant (the simulation running until it is done: its messages take
virtual time); the thread otherwise runs virtual time in slices of about
``slice_seconds`` of this machine's time, while it is not ``held`` (a paused
job, a job at its step target) and below the ``stop_at`` instant (a ``fit``'s
seconds).

Locks: ``_cond`` guards the flags and the queue of calls; ``_run_lock`` is held
for a slice and for a call, so a reader that takes it sees the simulation
between two instants. Order: ``_run_lock`` -> ``_cond``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .engine import Simulation


@dataclass
class _Call:
    fn: Callable[[], Any]
    as_task: bool = True
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class TimeDriver:
    """Runs one ``Simulation`` (made on its thread) until ``stop``; see the module docstring.

    ``run_task(fn)`` is how a call becomes a task (the session's ``drive``), set before the first call.
    """

    #: this machine's seconds a slice runs for, and sleeps after it (a test's: its driver acting anywhere)
    slice_seconds, between_slices = 0.05, 0.0

    def __init__(self, slice_seconds: float | None = None) -> None:
        if slice_seconds is not None:
            self.slice_seconds = slice_seconds
        self.run_task: Callable[[Callable[[], Any]], Any] | None = None
        # lock order: leaf, never held with _run_lock (the calls waiting, held, the time limit)
        self._cond = threading.Condition()
        # lock order: after the job's and its drivers' locks, before the simulated parts' own
        self._run_lock = threading.Lock()
        self._calls: deque[_Call] = deque()
        self._held = True
        self._stop_at = math.inf
        self._stopping = False
        self._made = threading.Event()
        self.real_seconds = 0.0
        self.error: BaseException | None = None  # what broke the simulation (a task's error escaped it)
        self.sim: Simulation | None = None
        self.thread = threading.Thread(target=self._main, name="dbkit-simulation", daemon=True)
        self.thread.start()
        self._made.wait()

    # ---- from any thread -------------------------------------------------------------------------
    def call(self, fn: Callable[[], Any], timeout: float = 300.0, as_task: bool = True) -> Any:
        """``fn()`` as a task at the current virtual instant (not ``as_task``: on the thread, between two events,
        for what starts or ends tasks itself); its value, or its error raised here."""
        if threading.current_thread() is self.thread:
            return self._run(fn) if as_task else fn()
        if not self.thread.is_alive():
            raise RuntimeError("the simulation has ended (its job was stopped)")
        call = _Call(fn, as_task)
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()
        if not call.done.wait(timeout):
            raise TimeoutError(f"the simulation did not answer within {timeout:g} s")
        if call.error is not None:
            raise call.error
        return call.result

    def hold(self, held: bool) -> None:
        """Stop virtual time (after the slice under way) or let it run."""
        with self._cond:
            self._held = held
            self._cond.notify_all()
        if held and self.sim is not None and self.sim.in_task():
            self.sim.halt()  # (from a task: the slice ends after this event)
        elif held and threading.current_thread() is not self.thread:
            with self._run_lock:  # a slice under way ends first
                pass

    @property
    def held(self) -> bool:
        """Whether virtual time stands still (``hold(True)``, from a driver or from a task)."""
        with self._cond:
            return self._held

    def stop_at(self, virtual: float | None) -> None:
        """Virtual time runs no further than ``virtual`` seconds (``None``: no limit)."""
        with self._cond:
            self._stop_at = math.inf if virtual is None else virtual
            self._cond.notify_all()

    def read(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` as an observer, from any thread: every call it makes to an actor is answered at once, under
        the actor's own lock as on a real worker, and takes no virtual time (its figures, its parameters as
        they stand). It takes no lock of the simulation's: a job's sample may read while a slice runs, and a
        slice may sample (the job's lock first, as ``dbkit.jobs.job`` orders them)."""
        sim = self.sim
        assert sim is not None
        return self._observe(sim, fn)

    @staticmethod
    def _observe(sim: Simulation, fn: Callable[[], Any]) -> Any:
        was, sim.observing = sim.observing, True
        try:
            return fn()
        finally:
            sim.observing = was

    def stop(self, timeout: float = 30.0) -> None:
        """End the thread (its simulation closed on it); idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    # ---- the thread ------------------------------------------------------------------------------
    def _run(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` on this thread: at once inside a task, else as a task that the simulation runs to its end."""
        sim = self.sim
        assert sim is not None and self.run_task is not None
        if sim.in_task():
            return fn()
        task = self.run_task(fn)
        sim.run_while(lambda: not task.done())  # (even held: a call's messages take virtual time)
        if not task.done():
            raise RuntimeError("the simulation ran out of events before the call was answered")
        return task.result()

    def _main(self) -> None:
        self.sim = sim = Simulation()  # (its greenlets are this thread's)
        self._made.set()
        try:
            while self._turn(sim):
                pass
        finally:
            with self._cond:
                calls, self._calls = list(self._calls), deque()
            for call in calls:
                call.error = RuntimeError("the simulation has ended")
                call.done.set()
            sim.close()

    def _turn(self, sim: Simulation) -> bool:
        """Answer the calls waiting, then run one slice if time may go on, else wait; False: end."""
        with self._cond:
            calls, self._calls = list(self._calls), deque()
        for call in calls:
            with self._run_lock:
                try:
                    call.result = self._run(call.fn) if call.as_task else call.fn()
                except BaseException as e:  # noqa: BLE001 - handed to the caller
                    call.error = e
            call.done.set()
        with self._cond:
            if self._stopping:
                return False
            go = not self._held and not sim.idle and sim.now < self._stop_at and not self._calls and self.error is None
            if not go:
                if not self._calls:
                    self._cond.wait(0.05)
                return True
            until = None if math.isinf(self._stop_at) else self._stop_at
        began = time.perf_counter()
        with self._run_lock:
            try:
                sim.run_for(self.slice_seconds, until=until)
            except Exception as e:  # noqa: BLE001 - the job reads it (``error``) and fails saying why
                self.error = e
            finally:
                self.real_seconds += time.perf_counter() - began
        time.sleep(self.between_slices)  # the GIL to the other threads (a panel drawing) between two slices
        return True
