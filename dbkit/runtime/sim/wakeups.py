"""Tasks of a simulated session waiting for something to happen, and what wakes them.

A paused replica waits until a message reaches its machine (``wait_on``; each call served by an actor
there is counted and wakes them, ``touched``); a driver waits until a task it started ends
(``wait_for_tasks``; ``task_ended``). Both are woken at the virtual instant it happens, not by polling,
and both waits are bounded. One thread (the simulation's) runs every task: nothing here needs a lock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import greenlet

from .engine import Simulation

if TYPE_CHECKING:
    from .task import SimTask


class Wakeups:
    """Who waits on ``sim`` for a machine's message or a task's end."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._waiting: dict[str, list[Any]] = {}  # machine -> its tasks waiting for a message (``wait_on``)
        self._calls: dict[str, int] = {}  # machine -> calls served by its actors so far
        self._ended: list[list] = []  # [task, still waiting] of each task in ``wait_for_tasks``

    def wait_on(self, address: str, seconds: float) -> None:
        """The current task waits on machine ``address`` until a call reaches an actor there, or ``seconds``."""
        me = greenlet.getcurrent()
        waiting = self._waiting.setdefault(address, [])
        waiting.append(me)
        resume = me.switch

        def expire() -> None:
            if me in waiting:
                waiting.remove(me)
                resume()

        cancel = self.sim.timeout(seconds, expire)
        self.sim._suspend()
        cancel()

    def touched(self, address: str) -> None:
        """A call reached an actor on ``address``: its waiting tasks go on at this instant, once the call is
        served (scheduled, never switched to from inside the service)."""
        self._calls[address] = self._calls.get(address, 0) + 1
        waiting = self._waiting.get(address)
        if waiting:
            woken, waiting[:] = list(waiting), []
            for g in woken:
                self.sim.at(0.0, g.switch)

    def calls_on(self, address: str) -> int:
        """Calls served by the actors of machine ``address`` so far."""
        return self._calls.get(address, 0)

    def wait_for_tasks(self, futures: list[SimTask], timeout: float, first: bool = False) -> None:
        """Return once all of ``futures`` (with ``first``: one) are done, or after ``timeout`` virtual seconds:
        the waiting task looks again each time a task ends (``task_ended``; no polling)."""
        def ready() -> bool:
            return any(f.done() for f in futures) if first else all(f.done() for f in futures)

        deadline = self.sim.now + timeout
        while not ready() and self.sim.now < deadline:
            me = greenlet.getcurrent()
            entry = [me, True]
            self._ended.append(entry)

            def expire(entry: list = entry, me: greenlet.greenlet = me) -> None:
                if entry[1]:
                    entry[1] = False
                    me.switch()

            cancel = self.sim.timeout(deadline - self.sim.now, expire)
            self.sim._suspend()
            cancel()

    def task_ended(self, task: SimTask) -> None:
        """``task`` ended: the tasks in ``wait_for_tasks`` look again, at this instant."""
        entries, self._ended = self._ended, []
        for entry in entries:
            if entry[1]:
                entry[1] = False
                self.sim.wake(entry[0])
