"""What Sandblaster's dispatcher and its replicas tell each other (DistBelief Sec. 4.2), as typed records.

A ``Slot`` is a replica as the dispatcher sees it; an ``Assignment`` is a work unit handed to it, with the
``Decisions`` (commit or discard) on units it finished before; a ``UnitResult`` comes back; a
``UnitRecord`` is one copy of one unit on the batch's timeline; a ``LostReplica`` says who was lost when.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .work_units import WorkUnit


@dataclass(frozen=True)
class Decisions:
    """What a replica should do with units it finished: ``commit`` (its copy won) or ``discard``."""

    commit: tuple[int, ...] = ()
    discard: tuple[int, ...] = ()

    def __add__(self, other: Decisions) -> Decisions:
        return Decisions(self.commit + other.commit, self.discard + other.discard)

    def __bool__(self) -> bool:
        return bool(self.commit or self.discard)


@dataclass
class Slot:
    """A replica as the dispatcher sees it: alive, its unit in flight, decisions to send, units not yet pushed."""

    index: int
    worker: str = "local"
    alive: bool = True
    unit: WorkUnit | None = None
    is_backup: bool = False
    pending: Decisions = Decisions()
    sent: Decisions = Decisions()  # the decisions that went out with the unit in flight
    unpushed: set[int] = field(default_factory=set)

    @property
    def busy(self) -> bool:
        return self.unit is not None


@dataclass(frozen=True)
class Assignment:
    """Compute ``unit`` of batch ``batch`` on replica ``slot``; apply ``decisions`` first; push
    nothing of it to the shards in ``skip`` (they hold it already)."""

    slot: int
    unit: WorkUnit
    batch: int
    backup: bool
    decisions: Decisions
    skip: frozenset[int]


@dataclass(frozen=True)
class UnitResult:
    """A replica finished ``unit`` of ``batch`` with its share of the loss; it pushed ``pushed`` meanwhile."""

    unit: int
    batch: int
    loss: float
    pushed: tuple[int, ...] = ()


@dataclass(frozen=True)
class UnitRecord:
    """One copy of a unit on the batch's timeline: who, from when to when, a backup, whether it won."""

    replica: int
    unit: int
    start: float
    end: float | None
    backup: bool
    won: bool


@dataclass(frozen=True)
class LostReplica:
    replica: int
    batch: int
    reason: str
