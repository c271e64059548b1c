"""A caller's end of an actor on a simulated machine, and what the session's registry holds for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .machines import Machine
from .shard_end import CallCosts, ShardEnd
from .shard_service import ShardService, VirtualFuture


class ActorEnd(ShardEnd):
    """One caller's end of a simulated actor (a shard's is a ``ShardEnd``): ``key`` names the actor. A call
    to an actor whose machine died raises ``RuntimeError`` at once, as a Dask actor's does; once served, a
    call tells ``touched`` (the session's: the tasks waiting on that machine look again), if given.
    ``call_seconds``: one way of a call, where it is not a control message's (a partition's: reached as an
    actor even from its own worker, as ``run_replica`` reaches it)."""

    def __init__(self, key: str, service: ShardService, client: Machine, alive: Callable[[str], bool],
                 touched: Callable[[str], None] | None, call_seconds: float | None = None) -> None:
        super().__init__(service, client)
        self.key, self._alive, self._touched, self._call_seconds = key, alive, touched, call_seconds

    def _message_costs(self, floats_up: int, floats_down: int, control: bool) -> CallCosts:
        costs = super()._message_costs(floats_up, floats_down, control)
        if control and self._call_seconds is not None:
            return costs._replace(delay=self._call_seconds)
        return costs

    def _call(self, kind: str, apply: Callable[[Any], Any], service: float, floats_up: int, floats_down: int,
              control: bool = False) -> VirtualFuture:
        where = self.service.machine.name
        if not self._alive(where):
            raise RuntimeError(f"Worker holding Actor was lost: simulated machine {where}")
        touched = self._touched
        if touched is None:  # (a shard: no task waits on its calls)
            return super()._call(kind, apply, service, floats_up, floats_down, control)

        def applied(actor: Any) -> Any:  # then the machine's waiting tasks look again
            try:
                return apply(actor)
            finally:
                touched(where)

        return super()._call(kind, applied, service, floats_up, floats_down, control)


class Placed:
    """What the registry holds for a simulated actor: releasing it takes it off its machine (``remove(key)``)."""

    def __init__(self, remove: Callable[[str], None], key: str) -> None:
        self._remove, self.key = remove, key

    def release(self) -> None:
        self._remove(self.key)
