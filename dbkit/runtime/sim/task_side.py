"""A task's own side of a simulated machine: its virtual clock, the actors beside it, its arithmetic.

Every task of a simulated session (a replica's loop) is a greenlet of the
simulation (``dbkit.runtime.sim.engine``); it is given its machine's side
first, and an actor that needs one (a partition) is built with it, as on the
other runtimes.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .engine import Simulation
    from .session import SimSession
    from .virtual_lock import VirtualEvent

T = TypeVar("T")

LOST = "simulated machine lost"

class VirtualTime:
    """A simulation's clock: ``now`` its virtual seconds, ``sleep`` a wait in virtual time (from a task).
    A running replica publishes its figures after every step (the driver's polls see them as they are)."""

    poll = 1.0
    publish_every = 0.0

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    def now(self) -> float:
        return self.sim.now

    def sleep(self, seconds: float) -> None:
        self.sim.sleep(seconds)

    def wait(self, seconds: float) -> None:
        self.sim.sleep(seconds)

    def lock(self) -> AbstractContextManager:
        return _virtual_lock()(self.sim)

    def event(self) -> VirtualEvent:
        from .virtual_lock import VirtualEvent

        return VirtualEvent(self.sim)


class MachineTime(VirtualTime):
    """The clock of a task on simulated machine ``address``: a paused replica's ``wait`` ends at once when
    a call reaches an actor of its machine (its control object's settings changed, or the driver looked),
    as a thread woken by a message would; ``poll`` is then only the longest it waits. A call that came since
    its last wait ended (while it looked at its settings, or pushed) ends the next one at once: no wake-up
    is lost."""

    def __init__(self, session: SimSession, address: str) -> None:
        super().__init__(session.sim)
        self._address, self._wakeups = address, session.wakeups
        self._seen = self._wakeups.calls_on(address)

    def wait(self, seconds: float) -> None:
        if self._wakeups.calls_on(self._address) == self._seen:
            self._wakeups.wait_on(self._address, seconds)
        self._seen = self._wakeups.calls_on(self._address)


class SimTaskSide:
    """``dbkit.runtime.TaskSide`` for a task on machine ``address`` of ``session``.

    A served actor (a parameter shard: its calls take service time) is reached through its queue even from
    its own machine, as a call in process whose arithmetic the cost model charges; an actor the model
    charges nothing for (a replica's control object) is that object itself when it lives here.
    ``cancelled`` (a zero-argument callable) says the task's handle was cancelled; ``number`` (a replica's
    index) seeds the jitter of its arithmetic.
    """

    def __init__(self, session: SimSession, address: str, cancelled: Callable[[], bool], number: int = 0) -> None:
        self._session, self._address, self._cancelled, self._number = session, address, cancelled, number

    @property
    def address(self) -> str:
        return self._address

    @property
    def time(self) -> VirtualTime:
        return MachineTime(self._session, self._address)

    def computing(self, network: Any) -> Any:
        return self._session.timed(network, self._address, self._number)

    def local(self, key: str) -> Any | None:
        return self._session.in_process(key, self._address)

    def same_process(self, worker: str, key: str) -> Any | None:
        """Nothing: each simulated machine is a process of its own (its partitions are stand-ins)."""
        return None

    def remote(self, cls: type, worker: str, key: str) -> Any:
        return self._session.end(key, self._address)

    def leave_slot(self) -> None:
        """Nothing to give up: every simulated task is a greenlet of its own."""

    def gather(self, calls: list) -> list:
        """The answers of ``calls`` (virtual futures), in order: each waited for in virtual time."""
        return [c.result() for c in calls]

    def one_blas_thread(self) -> AbstractContextManager[Any]:
        return nullcontext()

    def while_alive(self, read: Callable[[], T]) -> Callable[[], T]:
        """``read``, raising ``RuntimeError`` once this machine is dropped or the task cancelled."""
        session, address, cancelled = self._session, self._address, self._cancelled

        def checked() -> T:
            if cancelled() or not session.alive(address):
                raise RuntimeError(f"{LOST}: {address}")
            return read()

        return checked


def _virtual_lock() -> type:
    """``virtual_lock.VirtualLock``, imported once it is first needed (the simulator imports this package)."""
    global _VIRTUAL_LOCK
    if _VIRTUAL_LOCK is None:
        from .virtual_lock import VirtualLock

        _VIRTUAL_LOCK = VirtualLock
    return _VIRTUAL_LOCK


_VIRTUAL_LOCK: type | None = None

