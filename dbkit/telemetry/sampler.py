"""From cumulative replica figures to a sample's window: examples per second, and the staleness
of the pushes made since the last sample (a learner sees n_push change it, not a lifetime mean)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..ps import Histogram
from ..training.evaluate import Evaluation
from ..training.figures import ReplicaFigures
from .events import ByteCounts, EventStream, Sample


class Sampler:
    """Remembers the last sample's figures so that the next one can give its window."""

    def __init__(self) -> None:
        self._last: dict[int, ReplicaFigures] = {}
        self._last_t: float | None = None
        self._last_examples = 0

    def emit(self, events: EventStream, replicas: Mapping[int, ReplicaFigures], evaluation: Evaluation | None = None,
             step: int | None = None) -> Sample:
        """Append a ``Sample`` of ``replicas`` (cumulative figures) to ``events``; returns it.

        ``step`` defaults to the replicas' steps together (Sandblaster gives its iteration).
        """
        t = events.now()
        figures = tuple(f for _, f in sorted(replicas.items()))
        examples = sum(f.examples for f in figures)
        dt = t - self._last_t if self._last_t is not None else 0.0
        rate = (examples - self._last_examples) / dt if dt > 0 else 0.0
        staleness = Histogram.total(f.staleness - self._last.get(f.replica, _ZERO).staleness for f in figures)
        ages = Histogram.total(f.age - self._last.get(f.replica, _ZERO).age for f in figures)
        live = [f for f in figures if f.live]
        losses = [f.loss for f in live if f.loss is not None]
        fields: dict[str, Any] = dict(
            step=sum(f.steps for f in figures) if step is None else step, examples=examples,
            examples_per_second=rate, batch_loss=sum(losses) / len(losses) if losses else None,
            live_replicas=len(live), replicas=figures,
            bytes=ByteCounts.of(figures),
            staleness=staleness, staleness_examples=ages, evaluation=evaluation)
        self._last = {f.replica: f for f in figures}
        self._last_t, self._last_examples = t, examples
        return events.emit(Sample, **fields)


def history(events: EventStream) -> list[dict]:
    """One row per evaluated sample: ``t, step, examples, train_loss, test_loss, test_accuracy, replicas``
    (a job's ``history`` and a report's)."""
    return [{"t": s.t, "step": s.step, "examples": s.examples, **s.evaluation.to_dict(), "replicas": s.live_replicas}
            for s in events.of(Sample) if s.evaluation is not None]


_ZERO = ReplicaFigures(-1)
