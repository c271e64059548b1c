"""What a Downpour replica is told (``ReplicaSettings``) and what it reports (``ReplicaFigures``).

Both are immutable records: the driver replaces a replica's settings as a
whole, and a replica publishes a new figures record instead of changing one
in place, so any thread may read the last one it got without a lock.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from ..ps import Histogram, PushAnswer
from ..ps.records import coarse

NO_CAP = 2**62  # "no step cap" for a replica

#: a replica in one of these states is training or can train again; it ends as stopped (with the job),
#: removed, relaid (re-laid out), lost (its worker died), failed (an error) or diverged
LIVE = ("running", "paused")


@dataclass(frozen=True)
class ReplicaSettings:
    """What the driver asks of one replica; it reads them before every step.

    ``max_steps`` caps the replica's own steps (``NO_CAP``: none); ``stop``
    ends it after it pushes what it accumulated. ``slow`` > 1 makes each step
    take that many times longer (a straggler). ``crash`` ends it at once as
    ``lost``, its accumulated gradient never pushed, as when its machine dies.
    ``epoch`` numbers the driver's changes: a replica echoes the epoch it
    acted on in its figures. ``step_timeout``: a step that has not returned
    after this many seconds ends the replica as ``failed`` (0: no bound; the
    job's ``heartbeat_timeout``, on real machines).
    """

    n_fetch: int = 1
    n_push: int = 1
    lr: float = 0.05
    paused: bool = False
    stop: bool = False
    max_steps: int = NO_CAP
    epoch: int = 0
    slow: float = 1.0
    crash: bool = False
    step_timeout: float = 0.0

    def but(self, **changes: Any) -> ReplicaSettings:
        return replace(self, **changes)


@dataclass(frozen=True)
class PartitionFigures:
    """One partition of a partitioned replica: its worker ("" until it reports), its shards and its traffic."""

    partition: int
    worker: str = ""
    shards: tuple[int, ...] = ()
    pushes: int = 0
    fetches: int = 0
    rejected: int = 0
    nonfinite: int = 0
    examples: int = 0
    bytes_fetched: int = 0
    bytes_pushed: int = 0
    bytes_sent: int = 0
    staleness: Histogram = Histogram()
    age: Histogram = Histogram()

    def to_dict(self) -> dict:
        return {**_scalars(self), "shards": list(self.shards)}

    def to_json(self) -> dict:
        """Every field, as JSON (a wired partition's answer to its lead, ``dbkit.partition.lead``)."""
        return {**self.to_dict(), "staleness": [list(self.staleness.values), list(self.staleness.counts)],
                "age": [list(self.age.values), list(self.age.counts)]}

    @classmethod
    def from_json(cls, d: dict) -> PartitionFigures:
        """The figures ``to_json`` wrote."""
        return cls(**{**d, "shards": tuple(d["shards"]), "staleness": Histogram(*map(tuple, d["staleness"])),
                      "age": Histogram(*map(tuple, d["age"]))})


@dataclass(frozen=True)
class ReplicaFigures:
    """One replica's counters and state; cumulative since it started.

    ``staleness`` counts its accepted pushes by staleness in versions and
    ``age`` by age in examples (coarse bins, ``dbkit.ps.records.coarse``);
    ``epoch`` is that of the last ``ReplicaSettings`` it acted on.
    """

    replica: int
    worker: str = "local"
    state: str = "running"
    steps: int = 0
    pushes: int = 0
    fetches: int = 0
    examples: int = 0
    rejected: int = 0
    nonfinite: int = 0
    failures: int = 0
    error: str | None = None
    loss: float | None = None
    n_fetch: int = 1
    n_push: int = 1
    lr: float = 0.0
    slow: float = 1.0
    bytes_fetched: int = 0
    bytes_pushed: int = 0
    bytes_between_partitions: int = 0
    bytes_between_partitions_min: int = 0
    staleness: Histogram = Histogram()
    age: Histogram = Histogram()
    partitions: tuple[PartitionFigures, ...] = ()
    epoch: int = 0

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def but(self, **changes: Any) -> ReplicaFigures:
        return replace(self, **changes)

    def to_dict(self) -> dict:
        """The report's row (DESIGN.md: ``steps, pushes, fetches, examples, failures`` and the rest)."""
        d = _scalars(self)
        d["staleness"], d["staleness_examples"] = self.staleness.summary(), self.age.summary()
        if self.partitions:
            d["partitions"] = [p.to_dict() for p in self.partitions]
        return d


def _scalars(record: Any) -> dict:
    """A figures record's plain fields for a report row (histograms, partitions and the epoch are not)."""
    return {f.name: getattr(record, f.name) for f in fields(record)
            if f.name not in ("staleness", "age", "partitions", "shards", "epoch")}


@dataclass
class ReplicaCounters:
    """The counters a replica (whole or partitioned) keeps as it trains, and when it has diverged.

    A replica that meets ``max_nonfinite`` non-finite gradients in a row has
    ``diverged``: its parameters (from the shards) are beyond repair at this
    learning rate, so retrying would only spin.
    """

    max_nonfinite: int = 20
    steps: int = 0
    pushes: int = 0
    fetches: int = 0
    examples: int = 0
    rejected: int = 0
    nonfinite: int = 0
    nonfinite_in_a_row: int = 0
    staleness: Counter = field(default_factory=Counter)
    ages: Counter = field(default_factory=Counter)
    losses: deque = field(default_factory=lambda: deque(maxlen=50))
    _histograms: tuple[Histogram, Histogram] | None = field(default=None, repr=False, compare=False)

    @property
    def diverged(self) -> bool:
        return self.nonfinite_in_a_row >= self.max_nonfinite

    def dropped(self) -> None:
        """A gradient (or its push) was not finite and was dropped."""
        self.nonfinite += 1
        self.nonfinite_in_a_row += 1

    def stepped(self, loss: float, examples: int) -> None:
        self.steps += 1
        self.examples += examples
        self.nonfinite_in_a_row = 0
        self.losses.append(loss)

    def answered(self, answers: list[PushAnswer]) -> None:
        """Count one push's answers (one per shard)."""
        self.pushes += 1
        self._histograms = None  # (worked out again when next asked for)
        for a in answers:
            if a.accepted:
                if a.staleness is not None:
                    self.staleness[a.staleness] += 1
                if a.age is not None:
                    self.ages[coarse(a.age)] += 1
            else:
                self.rejected += 1

    def figures(self, replica: int, **more: Any) -> ReplicaFigures:
        """The counters as a record (a replica publishes one after each step on a simulated machine: its
        histograms are kept between pushes)."""
        if self._histograms is None:
            self._histograms = Histogram.of(self.staleness), Histogram.of(self.ages)
        staleness, age = self._histograms
        return ReplicaFigures(
            replica=replica, steps=self.steps, pushes=self.pushes, fetches=self.fetches, examples=self.examples,
            rejected=self.rejected, nonfinite=self.nonfinite,
            loss=float(np.mean(self.losses)) if self.losses else None, staleness=staleness, age=age, **more)
