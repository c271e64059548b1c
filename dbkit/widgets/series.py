"""What the live plots show of one run, read off its event stream a few events at a time.

A ``RunSeries`` keeps the number of the last event it read and takes only
what came after (``EventStream.since``), so a refresh costs the events of one
refresh interval, not the whole run. Plain Python: no widgets, no matplotlib.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ps import Histogram
from ..telemetry import BatchDone, Change, Divergence, EventStream, Relayout, ReplicaEvent, Sample, StateChange

#: how a change of each setting is written on the plots
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
    batch_loss: list[float | None] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    replica_rates: dict[int, tuple[list[float], list[float]]] = field(default_factory=dict)
    fetched: list[float] = field(default_factory=list)  # bytes per second over the window before t
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
    _last: Sample | None = None

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

    def _sample(self, s: Sample) -> None:
        earlier = self._last
        self.t.append(s.t)
        self.step.append(s.step)
        self.batch_loss.append(s.batch_loss)
        self.rate.append(s.examples_per_second)
        dt = s.t - earlier.t if earlier is not None else 0.0
        if earlier is not None and dt > 0:
            for replica, rate in s.rates(earlier).items():
                ts, rs = self.replica_rates.setdefault(replica, ([], []))
                ts.append(s.t)
                rs.append(rate)
            b, a = s.bytes, earlier.bytes
            self.fetched.append((b.fetched - a.fetched) / dt)
            self.pushed.append((b.pushed - a.pushed) / dt)
            self.between.append((b.between_partitions - a.between_partitions) / dt)
        else:
            self.fetched.append(0.0)
            self.pushed.append(0.0)
            self.between.append(0.0)
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
        self._last = s
