"""Copies of a job's state: ``Snapshot`` (cheap, the latest, for a UI thread: it never calls Dask) and
``FinalState`` (what a job gathered from its shards and replicas when it stopped)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import RunConfig
from ..ps import ShardFigures
from ..runtime.sim.simulated import Simulated
from ..telemetry import Change, Sample
from ..training.evaluate import Evaluation
from ..training.figures import ReplicaFigures

__all__ = ["FinalState", "Simulated", "Snapshot"]


@dataclass(frozen=True)
class FinalState:
    """What a job gathered when it stopped (or now, for a report of a running job)."""

    params: np.ndarray
    replicas: tuple[ReplicaFigures, ...]
    shards: tuple[ShardFigures, ...]
    cluster: dict


@dataclass(frozen=True)
class Snapshot:
    """What a job looks like now.

    ``changing`` holds settings asked and not yet applied (with the value
    asked); ``last_change`` the latest ``Change`` event; ``last_error`` the
    latest error or refusal in words; ``events`` how many events there are;
    ``dashboard`` the Dask dashboard's address (``None``: not served); ``simulation`` a simulated
    job's profile, machines and clocks (``None``: a real job).
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
    dashboard: str | None = None
    simulation: Simulated | None = None

    @property
    def live_replicas(self) -> int:
        return sum(r.live for r in self.replicas)
