"""A cheap, immutable copy of a job's latest state, for a UI thread: it never calls Dask."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..algorithms import Evaluation, ReplicaFigures
from ..config import RunConfig
from ..telemetry import Change, Sample


@dataclass(frozen=True)
class Snapshot:
    """What a job looks like now.

    ``changing`` holds settings asked and not yet applied (with the value
    asked); ``last_change`` the latest ``Change`` event; ``last_error`` the
    latest error or refusal in words; ``events`` how many events there are.
    """

    algorithm: str
    state: str
    t: float
    config: RunConfig
    step: int
    replicas: tuple[ReplicaFigures, ...]
    sample: Sample | None
    evaluation: Evaluation | None
    changing: dict[str, Any]
    last_change: Change | None
    last_error: str | None
    events: int

    @property
    def live_replicas(self) -> int:
        return sum(r.live for r in self.replicas)
