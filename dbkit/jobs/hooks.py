"""What each algorithm fills in to run as a ``Job``: the hooks ``dbkit.jobs.Job`` calls.

``Job`` owns the lifecycle, the change queue, the event stream and the
report; an algorithm (``SyncSGD``, ``DownpourSGD``, ``SandblasterLBFGS``)
says how to place and start its replicas, cap and hold their training, read
their figures, apply a change, and gather what is left when it stops. The
hooks that change the job are called with the job's ``_steer`` lock held.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import numpy as np

from ..config import RunConfig
from ..ps import ShardFigures
from ..telemetry import ByteCounts
from ..training.figures import ReplicaFigures
from .snapshot import FinalState

T = TypeVar("T")


class JobHooks(ABC):
    """The contract between ``Job`` and an algorithm's driver."""

    config: RunConfig
    algorithm: ClassVar[str]
    _machines: Any = None  # the machines given as ``cluster=`` (each algorithm sets it), if any

    @abstractmethod
    def _launch(self, paused: bool) -> None:
        """Place everything and begin training with no step cap, or ``paused`` (the caller holds ``_steer``)."""

    @abstractmethod
    def _resources(self) -> Any:
        """An object whose ``release()`` frees the cluster and replicas; it must not refer to the job."""

    @abstractmethod
    def _cap(self, steps: int | None) -> int | None:
        """Let training go on for ``steps`` more steps (``None``: no cap); returns the total to reach."""

    @abstractmethod
    def _hold(self, paused: bool) -> None:
        """Pause training (returning once it is paused) or let it go on."""

    @abstractmethod
    def _progress(self) -> int:
        """Steps (Sandblaster: iterations) done so far; in memory, never a call to Dask."""

    @abstractmethod
    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        """Every replica's latest figures; in memory, never a call to Dask."""

    @abstractmethod
    def _parameters(self) -> np.ndarray:
        """The current parameters (network order)."""

    @abstractmethod
    def _gather(self, stopping: bool) -> FinalState:
        """Parameters and figures now; with ``stopping``, first stop the replicas (they push what they have)."""

    def _seconds(self) -> float:
        """The clock ``fit(seconds=...)`` counts: its runtime's (a simulated cluster's: virtual seconds)."""
        cluster = self._cluster()
        return cluster.time.now() if cluster is not None else time.monotonic()

    def _cap_seconds(self, seconds: float | None, begin: float) -> None:
        """``fit``, begun at ``begin``, trains until ``begin + seconds`` on ``_seconds``' clock (a simulated
        cluster's time stops there exactly); ``None``: no such limit."""
        cluster = self._cluster()
        if cluster is not None:
            cluster.stop_time_at(None if seconds is None else begin + seconds)

    def _seconds_done(self, begin: float, seconds: float) -> bool:
        """Whether a ``fit`` that began at ``begin`` on ``_seconds``' clock has trained its ``seconds`` (to the
        rounding of ``begin + seconds``, where a simulated cluster's time stopped)."""
        return self._seconds() - begin >= seconds - 1e-9 * max(1.0, abs(begin))

    def _apply(self, changes: dict[str, Any], new: RunConfig) -> None:
        """Apply validated ``changes`` to the running job (``new`` is the config after them)."""

    def _check(self, config: RunConfig) -> None:
        """Refuse (``ValueError``) a config this job cannot take, beyond the settings' own ranges."""

    def _new_like(self, config: RunConfig) -> Any:
        """A new job of this kind on the same model, data and cluster, with ``config``."""
        raise NotImplementedError(f"{type(self).__name__} cannot make a new run of itself")

    def _read_shards(self) -> tuple[ShardFigures, ...]:
        """The shards' figures now (asked at every evaluation, so a report can show the last ones)."""
        return ()

    def _cluster(self) -> Any:
        """The ``dbkit.Cluster`` the job runs on, or ``None`` (in memory, or not started)."""
        return None

    def _on_cluster(self, fn: Callable[[], T]) -> T:
        """``fn()``, the drivers' work, on the job's runtime (at the current instant on a simulated cluster)."""
        cluster = self._cluster()
        return cluster.call(fn) if cluster is not None else fn()

    def _read(self, fn: Callable[[], T]) -> T:
        """``fn()``, reading figures or parameters (on a simulated cluster: an observer's, in no virtual time)."""
        cluster = self._cluster()
        return cluster.read(fn) if cluster is not None else fn()

    def _report_blocks(self, final: FinalState) -> dict:
        """The algorithm's own blocks of the report."""
        return {}

    def describe(self) -> str:
        """One line in the paper's words: the algorithm and its settings (and the profile, when simulated)."""
        sim = self._simulation()
        return self._describe() + (f" (simulated, {sim.profile})" if sim is not None else "")

    def _describe(self) -> str:
        """The algorithm and its settings, in the paper's words."""
        return f"{self.algorithm}: {self.config.replicas} replica(s), {self.config.rule_text()}"

    def _simulation(self) -> Any:
        """A simulated cluster's profile, machines and clocks (``None``: real machines)."""
        return None

    def _bytes(self, final: FinalState) -> ByteCounts:
        return ByteCounts.of(final.replicas)
