"""An actor whose methods wait, on a simulated machine: each call served at once in a task of its own.

A Dask actor whose methods are coroutines (a partition: its step waits for its partners' boundary slices
and for its shards) interleaves its calls on its worker's event loop: a partner's ``receive`` is served
while the step it feeds waits. So here each call that reaches the actor starts a task on its machine
(the actor was given its machine's side when placed), runs the method (to its end, if it is a
coroutine: ``finish`` below) and sends the answer back. A parameter shard's queue
(``dbkit.runtime.sim.shard_service.ShardService``) serves its calls one at a time instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Coroutine
from typing import Any

from ..run_through import run_through
from .cost import CostModel
from .engine import Simulation, SimulationError
from .machines import Machine, Network
from .shard_service import Request


def finish(coroutine: Coroutine) -> Any:
    """Run a coroutine that waits only in virtual time (through greenlets) to its end; its value."""
    try:
        return run_through(coroutine)
    except RuntimeError as e:
        raise SimulationError("a simulated partition awaited something that is not virtual time") from e


class ActorInTasks:
    """``actor`` on ``machine``; an answer takes ``answer_seconds``
    (one way of an actor call: through Dask even to a caller on the same worker)."""

    def __init__(self, sim: Simulation, actor: Any, machine: Machine, network: Network, cost: CostModel,
                 answer_seconds: float) -> None:
        self.sim, self.shard, self.machine, self.network, self.cost = sim, actor, machine, network, cost
        self.answer_seconds = answer_seconds

    def arrive(self, request: Request) -> None:
        """``request`` reached the actor's machine: its method runs now, in a task of its own."""
        self.sim.spawn(self._serve, request, name=f"{request.kind} on {self.machine.name}")

    def _serve(self, request: Request) -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = request.apply(self.shard)
            if inspect.iscoroutine(value):
                value = finish(value)
        except Exception as e:  # noqa: BLE001 - the caller gets it, as from a real actor
            error = e
        self.sim.at(self.answer_seconds, lambda: request.future.settle(value, error))
