"""Virtual time: an event queue (a heap), with dbkit's own code running in greenlets.

The simulator runs the replicas, shards, dispatcher and coordinator that the
Dask runtime runs, unchanged. Their code is synchronous: a replica's ``step``
calls ``result()`` on a fetch and waits. Here each of them runs in a
*task*, a greenlet; waiting (for a virtual future, for a core, for time to
pass) switches back to the loop, and an event's callback switches the task
back in at the event's virtual time. So the same lines of code block on a
socket under Dask and on virtual time here, and nothing but time is modelled.

The queue is a heap of (time, sequence, callback): events at one instant run
in the order they were scheduled, as SimPy's do. It replaced SimPy's
``Environment`` (the same order, so the same results) because the per-event
cost is what bounds the simulator's speed at one message a step: 0.9 us an
event against SimPy's 3.1 us here (``benchmarks/sim_speed.py`` has the rest).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import greenlet


class SimulationError(RuntimeError):
    """The simulation was used wrongly (a wait outside a task, a task that failed)."""


class Simulation:
    """The clock, the event queue and the tasks of one simulated run."""

    #: events between two readings of the real clock in ``run_for`` (a test sets 1: a slice may end anywhere)
    check_every = 64

    def __init__(self) -> None:
        self._now = 0.0
        self._queue: list[tuple[float, int, Callable[[], Any]]] = []
        self._order = itertools.count()  # ties at one instant: first scheduled, first run
        self._loop = greenlet.getcurrent()  # the greenlet that calls ``run``; tasks return to it
        self._thread = threading.get_ident()  # (its thread: another thread's greenlet is no task of this one)
        self.tasks: dict[int, Task] = {}  # the tasks that have not finished (by their order of spawning)
        self._failed: list[Task] = []  # finished tasks that raised (a joiner may take the error over)
        self._spawned = itertools.count()
        self.events = 0  # callbacks scheduled (a measure of the simulation's own work)
        self._cancelled: set[int] = set()  # timeouts cancelled before their time (``timeout``)
        self._halted = False  # ``halt`` was called: ``run`` / ``run_for`` return after the current event
        self._observer = threading.local()  # (``observing``: a flag of the observer's own thread)

    @property
    def observing(self) -> bool:
        """This thread observes the simulation from outside (a job's figures, its parameters): every call it
        makes to an actor is answered at once and takes no virtual time (``JobSession.read``)."""
        return getattr(self._observer, "on", False)

    @observing.setter
    def observing(self, on: bool) -> None:
        self._observer.on = on

    @property
    def now(self) -> float:
        """Virtual seconds since the simulation began."""
        return self._now

    def at(self, delay: float, callback: Callable[[], Any]) -> None:
        """Call ``callback()`` on the loop ``delay`` virtual seconds from now."""
        if delay < 0:
            raise ValueError(f"an event cannot be scheduled in the past (delay {delay})")
        self.events += 1
        heapq.heappush(self._queue, (self._now + delay, next(self._order), callback))

    def timeout(self, delay: float, callback: Callable[[], Any]) -> Callable[[], None]:
        """``at(delay, callback)`` that can be called off: returns the function that cancels it. A cancelled
        timeout neither runs nor moves the clock (a wait that ended early leaves no trace in time)."""
        if delay < 0:
            raise ValueError(f"an event cannot be scheduled in the past (delay {delay})")
        self.events += 1
        order, fired = next(self._order), [False]

        def fire() -> None:
            fired[0] = True
            callback()

        def cancel() -> None:
            if not fired[0]:
                self._cancelled.add(order)

        heapq.heappush(self._queue, (self._now + delay, order, fire))
        return cancel

    def halt(self) -> None:
        """End the ``run`` or ``run_for`` under way after the current event (a task that found its driver's
        cap reached: virtual time stands still there until the driver moves it)."""
        self._halted = True

    def spawn(self, fn: Callable[..., Any], *args: Any, name: str = "task") -> Task:
        """Start ``fn(*args)`` as a task at the current virtual time (it runs once the loop reaches it)."""
        task = Task(self, fn, args, name, next(self._spawned))
        self.tasks[task.number] = task
        self.at(0.0, task.resume)
        return task

    def _finished(self, task: Task) -> None:
        """``task`` returned or raised: no longer waited on (a run of thousands of tasks, a Sandblaster's work
        units, looks only at those still running, and at those that failed)."""
        self.tasks.pop(task.number, None)
        if task.error is not None:
            self._failed.append(task)

    def in_task(self) -> bool:
        """Whether the caller is one of this simulation's tasks (on its thread, not its loop)."""
        return threading.get_ident() == self._thread and greenlet.getcurrent() is not self._loop

    def _suspend(self) -> Any:
        """Give the loop control until this task is switched back in; returns what it is given."""
        if not self.in_task():
            raise SimulationError("only a simulated task can wait for virtual time")
        return self._loop.switch()

    def sleep(self, seconds: float) -> None:
        """The current task waits ``seconds`` of virtual time."""
        if seconds <= 0.0:
            return
        me = greenlet.getcurrent()  # ``at`` and ``_suspend`` in line: every step of every replica comes here
        if me is self._loop:
            raise SimulationError("only a simulated task can wait for virtual time")
        self.events += 1
        heapq.heappush(self._queue, (self._now + seconds, next(self._order), me.switch))
        self._loop.switch()

    def sleep_until(self, t: float) -> None:
        self.sleep(t - self._now)

    def wake(self, task_greenlet: greenlet.greenlet) -> None:
        """Switch a waiting task back in: at once from the loop, else through the loop (a task never
        switches into another directly, or the first would never be resumed)."""
        if greenlet.getcurrent() is self._loop:
            task_greenlet.switch()
        else:
            self.at(0.0, task_greenlet.switch)

    def run(self, until: float | None = None) -> None:
        """Process events until none is left (or virtual time ``until``). A task that raised raises here."""
        if greenlet.getcurrent() is not self._loop:
            raise SimulationError("run() is called from the greenlet that made the Simulation")
        queue, pop, cancelled = self._queue, heapq.heappop, self._cancelled
        self._halted = False
        while queue and (until is None or queue[0][0] < until) and not self._halted:
            when, order, callback = pop(queue)
            if cancelled and order in cancelled:  # a timeout no longer wanted: it does not move the clock
                cancelled.discard(order)
                continue
            self._now = when
            callback()
        if until is not None:
            self._now = max(self._now, until)
        stuck = [t.name for t in self.tasks.values() if not t.finished]
        if until is None and stuck:
            raise SimulationError(f"no event is left, yet {len(stuck)} simulated task(s) wait for one (a deadlock): "
                                  f"{', '.join(stuck[:5])}")
        self._raise_failed()


    def run_while(self, going: Callable[[], bool]) -> None:
        """Process events while ``going()`` holds and one is left (a driver's change waiting to be carried out
        by a task). A task that raised raises here, as in ``run``."""
        if greenlet.getcurrent() is not self._loop:
            raise SimulationError("run_while() is called from the greenlet that made the Simulation")
        queue, pop, cancelled = self._queue, heapq.heappop, self._cancelled
        while queue and going():  # (a driver's change runs even in a halted simulation)
            when, order, callback = pop(queue)
            if cancelled and order in cancelled:  # a timeout no longer wanted: it does not move the clock
                cancelled.discard(order)
                continue
            self._now = when
            callback()
        self._raise_failed()

    def _raise_failed(self) -> None:
        self._failed = failed = [t for t in self._failed if t.error is not None]  # (a joiner took the others)
        if failed:
            raise SimulationError(f"simulated task {failed[0].name} failed: "
                                  f"{type(failed[0].error).__name__}: {failed[0].error}") from failed[0].error

    def run_for(self, real_seconds: float, until: float | None = None) -> None:
        """Process events for about ``real_seconds`` of this machine's time, stopping early when none
        is left or the next is at virtual time ``until`` or later (then the clock reads ``until``), or a task
        ``halt`` s it.

        A driven simulation (a job's) runs in such slices, its driver acting between two of them at
        the current virtual instant. A task that raised raises here, as in ``run``.
        """
        if greenlet.getcurrent() is not self._loop:
            raise SimulationError("run_for() is called from the greenlet that made the Simulation")
        queue, pop, clock, cancelled = self._queue, heapq.heappop, time.perf_counter, self._cancelled
        deadline, done = clock() + real_seconds, 0
        self._halted = False
        while queue and (until is None or queue[0][0] < until) and not self._halted:
            when, order, callback = pop(queue)
            if cancelled and order in cancelled:  # a timeout no longer wanted: it does not move the clock
                cancelled.discard(order)
                continue
            self._now = when
            callback()
            done += 1
            if done % self.check_every == 0 and clock() >= deadline:  # (the real clock is read every 64 events)
                break
        if until is not None and not self._halted and (not queue or queue[0][0] >= until) and self._now < until:
            self._now = until
        self._raise_failed()

    @property
    def idle(self) -> bool:
        """No event is waiting: every task has ended or waits for something only a driver can give."""
        return len(self._queue) <= len(self._cancelled)  # (each cancelled timeout is still in the queue)

    def close(self) -> None:
        """End every task still waiting (``GreenletExit`` in it); from the loop's own thread."""
        if greenlet.getcurrent() is not self._loop:
            raise SimulationError("close() is called from the greenlet that made the Simulation")
        self._queue.clear()
        for task in list(self.tasks.values()):
            if not task.finished and task.greenlet:
                task.greenlet.throw()


class Task:
    """One greenlet of simulated work; ``finished`` becomes true when its function returns or raises."""

    def __init__(self, sim: Simulation, fn: Callable[..., Any], args: tuple, name: str, number: int = 0) -> None:
        self.sim, self.name, self.number = sim, name, number
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._waiters: list[greenlet.greenlet] = []
        self.greenlet = greenlet.greenlet(lambda: self._body(fn, args), parent=sim._loop)

    def _body(self, fn: Callable[..., Any], args: tuple) -> None:
        try:
            self.result = fn(*args)
        except greenlet.GreenletExit:  # collected while waiting (a run stopped at ``until``): not a failure
            raise
        except BaseException as e:  # noqa: BLE001 - kept, and raised by Simulation.run
            self.error = e
        finally:
            self.finished = True
            self.sim._finished(self)
            for waiter in self._waiters:
                self.sim.wake(waiter)

    def resume(self) -> None:
        if not self.finished:
            self.greenlet.switch()

    def join(self) -> Any:
        """Wait (from another task) until this task has finished; returns its result, or raises its error
        (which is then the joiner's to handle, not ``Simulation.run``'s)."""
        if not self.finished:
            self._waiters.append(greenlet.getcurrent())
            self.sim._suspend()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.result
