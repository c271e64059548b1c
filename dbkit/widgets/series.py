"""What the live plots show of one run, read off its event stream a few events at a time.

A ``RunSeries`` keeps the number of the last event it read and takes only
what came after (``EventStream.since``), so a refresh costs the events of one
refresh interval, not the whole run. Plain Python: no widgets, no matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ps import Histogram
from ..telemetry import (
    BatchDone,
    Change,
    Divergence,
    EventStream,
    Relayout,
    ReplicaEvent,
    Sample,
    StateChange,
    trailing_rate,
)

#: how a change of each setting is written on the plots
REPLICA_LINES = 8  # replicas drawn one line each; beyond, only their mean (200 lines would be noise)
SETBACK = 0.1  # test accuracy this far below the run's best: the panel says so (a run blown up by a change)
SHORT = {"n_fetch": "n_fetch", "n_push": "n_push", "lr": "lr", "optimizer": "", "replicas": "replicas",
         "partitions": "partitions", "shards": "shards", "slow_replicas": "slow", "work_unit_size": "unit",
         "backup": "backups", "balance": "balance"}


@dataclass(frozen=True)
class Marker:
    """A vertical line on the plots: something changed at ``t`` seconds, after ``step`` steps."""

    t: float
    step: int
    label: str


def change_label(setting: str, old: object, new: object) -> str:
    """``n_push 1→4``, ``adagrad``, ``backups off``: a change in a few characters."""
    if setting == "optimizer":
        return str(new)
    if isinstance(new, bool):
        return f"{SHORT.get(setting, setting)} {'on' if new else 'off'}"
    if setting == "slow_replicas":
        slow = dict(new) if new else {}  # type: ignore[call-overload]
        return "no straggler" if not slow else "slow " + ", ".join(f"r{i}×{f:g}" for i, f in slow.items())
    return f"{SHORT.get(setting, setting)} {old}→{new}"


@dataclass
class RunSeries:
    """The plotted figures of one run; ``update(events)`` reads the new events and says if any came."""

    label: str
    algorithm: str
    target: float | None = None  # the run's target_accuracy: marked when first reached
    seq: int = -1
    # every sample
    t: list[float] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)
    batch_loss: list[float | None] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)  # examples per second over the last few samples (``rate.py``)
    per_replica: list[float] = field(default_factory=list)  # ``rate`` over the live replicas
    mean_staleness: list[float | None] = field(default_factory=list)  # the window's pushes (None: none)
    replica_rates: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)
    fetched: list[float] = field(default_factory=list)  # bytes per second over the last few samples
    pushed: list[float] = field(default_factory=list)
    between: list[float] = field(default_factory=list)
    # every evaluation
    eval_t: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    test_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    # the latest of each
    staleness: Histogram = Histogram()
    staleness_examples: Histogram = Histogram()
    batch: BatchDone | None = None
    markers: list[Marker] = field(default_factory=list)
    state: str = "created"
    reached: float | None = None  # seconds at which the target accuracy was first reached
    _replica_examples: dict[int, tuple[list[float], list[int]]] = field(default_factory=dict)
    _bytes: dict[str, list[int]] = field(default_factory=dict)  # cumulative, per kind

    def update(self, events: EventStream) -> bool:
        """Take the events after ``seq``; True if there were any."""
        new = events.since(self.seq)
        if not new:
            return False
        for e in new:
            if isinstance(e, Sample):
                self._sample(e)
            elif isinstance(e, Change) and e.applied is not None and not e.superseded and e.setting != "paused":
                self._mark(e.applied, change_label(e.setting, e.old, e.new))
            elif isinstance(e, ReplicaEvent) and e.what in ("lost", "failed"):
                self._mark(e.t, f"replica {e.replica} {e.what}")
            elif isinstance(e, Relayout):
                pass  # its Change (partitions or shards) is marked already
            elif isinstance(e, Divergence):
                self._mark(e.t, "diverged")
            elif isinstance(e, BatchDone):
                self.batch = e
            elif isinstance(e, StateChange):
                self.state = e.state
        self.seq = new[-1].seq
        return True

    def _mark(self, t: float, label: str) -> None:
        step = self.step[-1] if self.step else 0
        if self.markers and abs(self.markers[-1].t - t) < 0.05:  # one change of several settings: one line
            last = self.markers[-1]
            self.markers[-1] = Marker(last.t, last.step, f"{last.label}, {label}")
        else:
            self.markers.append(Marker(t, step, label))

    def setback(self) -> str | None:
        """A line saying the test accuracy fell well below the run's best (and after which change), or None."""
        if len(self.test_accuracy) < 2:
            return None
        best, now = max(self.test_accuracy), self.test_accuracy[-1]
        if best - now < SETBACK:
            return None
        after = [m.label for m in self.markers if m.t <= self.eval_t[-1] and not m.label[:1].isdigit()]
        return (f"test accuracy fell from {best:.2f} to {now:.2f}" + (f" after {after[-1]}" if after else "")
                + ": stale pushes at this rate overshoot (lower lr, n_fetch/n_push or replicas)")

    def _sample(self, s: Sample) -> None:
        self.t.append(s.t)
        self.step.append(s.step)
        self.examples.append(s.examples)
        self.batch_loss.append(s.batch_loss)
        self.rate.append(trailing_rate(self.t, self.examples))
        self.per_replica.append(self.rate[-1] / s.live_replicas if s.live_replicas else 0.0)
        self.mean_staleness.append(s.staleness.mean() if s.staleness.count else None)
        for r in s.replicas if len(s.replicas) <= REPLICA_LINES else ():  # each over its own last samples
            ts, counts = self._replica_examples.setdefault(r.replica, ([], []))
            ts.append(s.t)
            counts.append(r.examples)
            if len(ts) > 1:
                times, rates = self.replica_rates.setdefault(r.replica, ([], []))
                times.append(s.t)
                rates.append(trailing_rate(ts, counts))
        for name, total in (("fetched", s.bytes.fetched), ("pushed", s.bytes.pushed),
                            ("between", s.bytes.between_partitions)):
            self._bytes.setdefault(name, []).append(total)
            getattr(self, name).append(trailing_rate(self.t, self._bytes[name]))
        if s.staleness.count:
            self.staleness, self.staleness_examples = s.staleness, s.staleness_examples
        if s.evaluation is not None:
            self.eval_t.append(s.t)
            self.eval_step.append(s.step)
            self.test_loss.append(s.evaluation.test_loss)
            self.test_accuracy.append(s.evaluation.test_accuracy)
            if self.target is not None and self.reached is None and s.evaluation.test_accuracy >= self.target:
                self.reached = s.t
                self._mark(s.t, f"{self.target:.0%} at {s.t:.1f} s")
