"""A job's live event stream: typed, numbered, timed, append-only, safe to read from any thread.

Every job (``dbkit.SyncSGD``, ``dbkit.DownpourSGD``, ``dbkit.SandblasterLBFGS``)
writes its ``events``: periodic ``Sample`` s of its figures, each ``Change`` of a
setting (asked when, applied when), replicas added, removed, lost or ended
(``ReplicaEvent``), re-layouts, divergence, errors, state changes, and for
Sandblaster each batch's timeline of work units. A poller keeps the number of
the last event it read and asks ``events.since(seq)`` for what came after; a
job's ``history`` is read off its samples, and its report contains them all.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..ps import Histogram, ShardFigures
from ..sandblaster.records import LostReplica, UnitRecord
from ..training.evaluate import Evaluation
from ..training.figures import ReplicaFigures


@dataclass(frozen=True)
class Event:
    """``seq``: its number in the stream (0, 1, ...); ``t``: seconds since the job started."""

    seq: int
    t: float

    def to_dict(self) -> dict:
        """The event as JSON's types: what ``dataclasses.asdict`` gives, tuples as lists, keys as strings
        (without ``asdict``'s deep copy of every leaf: a Sandblaster run's batch events hold a record per
        copy of a unit, 20,000 and more)."""
        return {"type": type(self).__name__, **_plain(self)}


@dataclass(frozen=True)
class ByteCounts:
    """Bytes moved so far: fetched from and pushed to the shards, sent between partitions, and the
    minimum the partitions' connectivity requires."""

    fetched: int = 0
    pushed: int = 0
    between_partitions: int = 0
    between_partitions_min: int = 0

    @classmethod
    def of(cls, replicas: Iterable[ReplicaFigures]) -> ByteCounts:
        """The bytes of these replicas together."""
        r = list(replicas)
        return cls(sum(f.bytes_fetched for f in r), sum(f.bytes_pushed for f in r),
                   sum(f.bytes_between_partitions for f in r), sum(f.bytes_between_partitions_min for f in r))


@dataclass(frozen=True)
class Sample(Event):
    """The job's figures at time ``t``; rates and staleness are over the window since the last sample.

    ``staleness`` counts this window's accepted pushes by staleness in
    versions, ``staleness_examples`` by age in examples (coarse bins);
    ``evaluation`` is present when the parameters were evaluated for this sample.
    """

    step: int
    examples: int
    examples_per_second: float
    batch_loss: float | None
    live_replicas: int
    replicas: tuple[ReplicaFigures, ...]
    bytes: ByteCounts
    staleness: Histogram
    staleness_examples: Histogram
    evaluation: Evaluation | None = None

    def rates(self, earlier: Sample) -> dict[int, float]:
        """Examples per second of each replica between ``earlier`` and this sample."""
        dt = self.t - earlier.t
        before = {r.replica: r.examples for r in earlier.replicas}
        return {r.replica: (r.examples - before.get(r.replica, 0)) / dt if dt > 0 else 0.0 for r in self.replicas}


@dataclass(frozen=True)
class Change(Event):
    """A setting asked to change at ``asked`` and applied at ``applied`` (job seconds);
    ``superseded``: a later request for the same setting came first, so this value never applied."""

    setting: str
    old: Any
    new: Any
    asked: float
    applied: float | None
    superseded: bool = False


@dataclass(frozen=True)
class ReplicaEvent(Event):
    """Replica ``replica``: ``what`` in started, added, removed, relaid, lost, failed, diverged, stopped."""

    replica: int
    what: str
    worker: str = ""
    reason: str | None = None


@dataclass(frozen=True)
class ShardLost(Event):
    """Parameter shard ``shard`` was lost with ``worker``; ``restored_on`` names where it came back from
    its checkpoint (empty: it did not). ``updates_lost``: the updates it had applied after that
    checkpoint, counted from the newest version the driver had read of it (so at least this many)."""

    shard: int
    worker: str
    step: int
    restored_on: str = ""
    checkpoint_version: int | None = None
    version_read: int | None = None
    updates_lost: int | None = None
    seconds: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class WorkerHung(Event):
    """``worker`` is still listed by the scheduler but did not answer for ``silent`` seconds (more than the
    job's ``heartbeat_timeout``): a stopped or wedged machine. The job dropped it from the scheduler and
    went on as if it had died; ``shards`` were the parameter shards on it."""

    worker: str
    silent: float
    shards: tuple[int, ...] = ()


@dataclass(frozen=True)
class WorkerSilent(Event):
    """``worker`` did not answer a heartbeat for ``silent`` seconds, less than the job's ``heartbeat_timeout``,
    and then answered: a network partition that healed, a long pause. The job kept it, and what it holds
    (``shards``, replicas) went on where it stopped."""

    worker: str
    silent: float
    shards: tuple[int, ...] = ()


@dataclass(frozen=True)
class Checkpointed(Event):
    """The shards wrote a checkpoint into ``directory`` (their ``versions``), at ``step``."""

    directory: str
    step: int
    versions: tuple[int, ...]


@dataclass(frozen=True)
class Relayout(Event):
    """The parameters moved to ``shards`` shards aligned to ``partitions`` partitions (DistBelief Sec. 3)."""

    step: int
    partitions: int
    shards: int
    shards_before: tuple[ShardFigures, ...]


@dataclass(frozen=True)
class Divergence(Event):
    """Training diverged at ``step``: ``message`` says where and what to do instead."""

    step: int
    message: str


@dataclass(frozen=True)
class ErrorEvent(Event):
    """Something failed in ``where`` (a change, a replica, the driver); training may go on."""

    where: str
    message: str


@dataclass(frozen=True)
class StateChange(Event):
    """The job is now ``state`` (running, paused, finished, diverged, failed, stopped)."""

    state: str
    reason: str = ""


@dataclass(frozen=True)
class BatchDone(Event):
    """A Sandblaster batch gradient: its seconds, its work units on a timeline, replicas lost in it."""

    batch: int
    seconds: float
    loss: float
    units: tuple[UnitRecord, ...]
    lost: tuple[LostReplica, ...] = ()


E = TypeVar("E", bound=Event)


class EventStream:
    """The append-only, numbered list of a job's events; ``t`` counts from ``origin`` (default: now)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter, origin: float | None = None) -> None:
        self._clock = clock
        self._origin = clock() if origin is None else origin
        self._events: list[Event] = []
        self._by_kind: dict[type, list[Event]] = {}
        # lock order: leaf, the innermost: any other lock may be held while an event is emitted
        self._lock = threading.Lock()

    def restart_clock(self) -> None:
        """Count ``t`` from now on (a job calls this when it starts)."""
        self._origin = self._clock()

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Count ``t`` on ``clock`` from now on (a job's runtime's: virtual seconds on a simulated cluster)."""
        self._clock = clock
        self._origin = clock()

    def now(self) -> float:
        """Seconds on this stream's clock."""
        return self._clock() - self._origin

    def emit(self, kind: type[E], **fields: Any) -> E:
        """Append a new event of ``kind``; returns it."""
        with self._lock:
            event = kind(seq=len(self._events), t=round(self.now(), 4), **fields)
            self._events.append(event)
            self._by_kind.setdefault(kind, []).append(event)
        return event

    def since(self, seq: int = -1) -> list[Event]:
        """Every event numbered after ``seq`` (all of them for -1), oldest first."""
        with self._lock:
            return self._events[max(seq + 1, 0):]

    def of(self, kind: type[E]) -> list[E]:
        """Every event of ``kind``, oldest first."""
        with self._lock:
            return list(self._by_kind.get(kind, ()))  # type: ignore[arg-type]

    def last(self, kind: type[E] | None = None) -> E | None:
        with self._lock:
            events = self._by_kind.get(kind, ()) if kind is not None else self._events
            return events[-1] if events else None  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.since())

    def to_dicts(self) -> list[dict]:
        return [e.to_dict() for e in self.since()]


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _plain(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
