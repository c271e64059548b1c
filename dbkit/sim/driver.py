"""A simulated run driven from outside: its own thread runs virtual time in slices, and between two
slices, at the current virtual instant, does what its job asks (a change, a lost replica, a stop).

The simulation's tasks are greenlets of one thread, so everything that touches
the run happens on that thread: ``call(fn)`` hands ``fn`` over and waits for
its answer. The thread runs slices of about ``slice_seconds`` of this
machine's time while the job trains and is not held; a held run (paused, or
at a ``fit``'s step or virtual-time target) costs nothing and its virtual
time stands still. After every slice it calls ``after_slice(run)``, a method of its job
(the job publishes figures and samples there).

Locks: ``_cond`` guards the driver's own flags and queue; ``_run_lock`` is held
for a slice and for a call, so a reader that takes it sees the run between two
instants. Order: ``_run_lock`` -> ``_cond`` (the thread never waits on ``_cond``
holding ``_run_lock``). The thread holds its job only through ``after_slice``,
a weak method, so a forgotten job is collected and its finalizer stops it.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .run import SimulatedRun


@dataclass
class _Call:
    fn: Callable[[SimulatedRun], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class VirtualClock:
    """Seconds of the driven simulation (0 before it exists): the clock of its job's event stream."""

    def __init__(self) -> None:
        self.run: SimulatedRun | None = None

    def __call__(self) -> float:
        run = self.run
        return run.start + run.sim.now if run is not None else 0.0


class SimulationDriver:
    """The thread that owns one simulated run (made by ``make_run`` on that thread, then begun).

    ``hold(True)`` stops virtual time after the current slice; ``until`` caps it;
    ``call`` runs a function on the run between slices; ``stop`` ends the thread.
    """

    def __init__(self, make_run: Callable[[], SimulatedRun], after_slice: Callable[[SimulatedRun], None],
                 clock: VirtualClock | None = None, slice_seconds: float = 0.05) -> None:
        self.make_run: Callable[[], SimulatedRun] | None = make_run
        self._after = weakref.WeakMethod(after_slice)  # a job's method: the thread does not keep its job
        self.slice_seconds = slice_seconds
        self.yield_seconds = 0.005
        self.clock = clock or VirtualClock()
        # lock order: leaf, never held with _run_lock (the calls waiting, held, the time limit)
        self._cond = threading.Condition()
        # lock order: after Job._steer and Job._sample_lock, before the simulated parts' own (shards, events)
        # and the job's _published (held while a slice runs or a reader reads the run)
        self._run_lock = threading.Lock()
        self._calls: deque[_Call] = deque()
        self._held = True
        self._until = math.inf
        self._stopping = False
        self._begun = threading.Event()
        self._error: BaseException | None = None
        self.real_seconds = 0.0
        self.thread = threading.Thread(target=self._main, name="dbkit-simulation", daemon=True)

    # ---- from the job's threads -----------------------------------------------------------------
    def start(self, held: bool = True) -> None:
        """Make and begin the run on the driver's thread; raises what making it raised."""
        self._held = held
        self.thread.start()
        self._begun.wait()
        if self._error is not None:
            self.thread.join()
            raise self._error

    def call(self, fn: Callable[[SimulatedRun], Any], timeout: float = 120.0) -> Any:
        """``fn(run)`` on the driver's thread at the current virtual instant; returns its result."""
        if threading.current_thread() is self.thread:
            assert self.clock.run is not None
            return fn(self.clock.run)
        if not self.thread.is_alive():
            raise RuntimeError("the simulation has ended")
        call = _Call(fn)
        with self._cond:
            self._calls.append(call)
            self._cond.notify_all()
        if not call.done.wait(timeout):
            raise TimeoutError(f"the simulation did not answer within {timeout:g} s")
        if call.error is not None:
            raise call.error
        return call.result

    def hold(self, held: bool) -> None:
        """Stop virtual time (returning once no slice runs) or let it run."""
        with self._cond:
            self._held = held
            self._cond.notify_all()
        if held and threading.current_thread() is not self.thread:
            with self._run_lock:  # a slice under way ends first
                pass

    def run_until(self, virtual: float) -> None:
        """Let virtual time run no further than ``virtual`` seconds of the simulation (``math.inf``: no limit)."""
        with self._cond:
            self._until = virtual
            self._cond.notify_all()

    def run_for(self, seconds: float) -> None:
        """Let virtual time run ``seconds`` more, then stand still."""
        run = self.clock.run
        self.run_until((run.sim.now if run is not None else 0.0) + seconds)

    @property
    def at_limit(self) -> bool:
        """Virtual time has reached ``run_until``'s limit."""
        run = self.clock.run
        return run is not None and run.sim.now >= self._until

    def read(self, fn: Callable[[SimulatedRun], Any]) -> Any:
        """``fn(run)`` from any thread while no slice runs (a reader: it must not wait in virtual time)."""
        with self._run_lock:
            assert self.clock.run is not None
            return fn(self.clock.run)

    def stop(self, timeout: float = 30.0) -> None:
        """End the thread (its tasks are ended on it); idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    # ---- the driver's thread ----------------------------------------------------------------------
    def _main(self) -> None:
        try:
            assert self.make_run is not None
            run, self.make_run = self.make_run(), None
            run.begin()
            self.clock.run = run
        except BaseException as e:  # noqa: BLE001 - raised by ``start`` in the caller's thread
            self._error = e
            self._begun.set()
            return
        self._begun.set()
        try:
            while self._tick(run):
                pass
        finally:
            with self._cond:
                calls, self._calls = list(self._calls), deque()
            for call in calls:
                call.error = RuntimeError("the simulation has ended")
                call.done.set()
            run.sim.close()

    def _tick(self, run: SimulatedRun) -> bool:
        """Answer the calls waiting, then run one slice if the run may go on, else wait; False: end."""
        with self._cond:
            calls, self._calls = list(self._calls), deque()
        if calls:
            with self._run_lock:
                for call in calls:
                    try:
                        call.result = call.fn(run)
                    except BaseException as e:  # noqa: BLE001 - handed to the caller
                        call.error = e
                    call.done.set()
        with self._cond:
            if self._stopping:
                return False
            go = (not self._held and run.state == "running" and not run.sim.idle and run.sim.now < self._until
                  and not self._calls and not run.resting)
            if not go:
                if not self._calls:
                    self._cond.wait(0.05)
                return True
            until = self._until
        began = time.perf_counter()
        with self._run_lock:
            try:
                run.sim.run_for(self.slice_seconds, until=None if math.isinf(until) else until)
            except Exception as e:  # noqa: BLE001 - the run ends failed; its job says why
                run.fail(f"the simulation: {type(e).__name__}: {e}")
            finally:
                spent = time.perf_counter() - began
                self.real_seconds += spent
                run.add_real_seconds(spent)
            after = self._after()
            if after is None:  # the job is gone
                return False
            try:
                after(run)
            except Exception as e:  # noqa: BLE001 - as above
                run.fail(f"after a slice: {type(e).__name__}: {e}")
            finally:
                del after
        time.sleep(self.yield_seconds)  # the GIL to the other threads (a panel drawing) between two slices
        return True
