"""What replicas share besides parameters: the coordinators, by name (the third extension point, beside the
update rules and the replica loops).

DistBelief's replicas share only parameters, through the shards (Sec. 4.1), and
the shards stay the paper's parameter server. The ideas that came after bound or
drop stale work with a little shared knowledge: SSP's clocks, backup sync's
rounds, a barrier. That knowledge lives in a coordinator: an actor of its own,
placed by the job beside shard 0 (``Placement.coordinator_for``) when the
replica loop names one (``coordinator_name = "replica-clocks"``), and reached by each
of its replicas as ``self.coordinator``, whose every method call returns the
coordinator's answer, on Dask, in process and in virtual time alike.

A coordinator is any class with a ``name`` and a ``leave(replica)`` method: the
driver makes a replica that ended (lost, failed, diverged) leave, so that nobody
waits for it for ever. Its methods are called from many replicas at once: it
guards its own state. ``register_coordinator`` makes it one a loop can name, so
a new barrier or gossip scheme is one file (``tests/test_coordinator.py`` has a
barrier in under 60 lines).
"""

from __future__ import annotations

from typing import Any

from ..named_classes import NamedClasses
from ..ps.client import resolve

COORDINATORS = NamedClasses(None, "coordinator", "barrier")


def register_coordinator(cls: type) -> type:
    """Make ``cls`` a coordinator a replica loop can name (a class decorator); refused with a clear message:
    no name, a name taken by another class, no ``leave(replica)``."""
    if not isinstance(cls, type) or not callable(getattr(cls, "leave", None)):
        raise TypeError(f"a coordinator is a class with a leave(replica) method, got {cls!r}")
    COORDINATORS.add(cls)
    return cls


def coordinator_class(name: str) -> type:
    """The coordinator registered as ``name``, or ``ValueError`` listing those registered."""
    return COORDINATORS.get(name)


class CoordinatorEnd:
    """A replica's end of its coordinator (the actor itself, or a proxy whose calls answer with futures):
    ``end.tick("replica3", 7)`` calls the coordinator and returns its answer."""

    def __init__(self, actor: Any) -> None:
        self._actor = actor

    def __getattr__(self, method: str) -> Any:
        call = getattr(self._actor, method)

        def answered(*args: Any) -> Any:
            return resolve(call(*args))

        return answered
