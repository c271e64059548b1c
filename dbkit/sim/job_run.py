"""A simulated run to its end: ``DownpourSGD`` or ``SandblasterLBFGS`` on a ``dbkit.sim.Cluster``, trained for
the config's steps or simulated seconds, as ``dbkit simulate`` and the paper's figures run it.

It is the job itself (the same drivers, budgets, events and report as on
Dask), given what a figure needs: parameters to start from (a warm start's,
``initial``, whose end is ``start`` simulated seconds in: its history's ``t``
counts from there), a test accuracy at which it finishes (``stop_at``), and a
callback told each evaluation's simulated seconds and accuracy while it runs
(``on_evaluation``: a figure's progress lines).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..downpour import DownpourSGD
from ..nn import Network
from ..runtime.sim.layout import Cluster
from ..sandblaster import SandblasterLBFGS

#: the job each simulated algorithm is (its class: ``config=`` and ``cluster=`` as keywords)
JOBS: dict[str, Any] = {"downpour": DownpourSGD, "sandblaster": SandblasterLBFGS}


class JobRun:
    """``config`` (Downpour or Sandblaster) on the simulated ``cluster``; see the module docstring."""

    def __init__(self, config: RunConfig, network: Network, data: Dataset, cluster: Cluster, *, start: float = 0.0,
                 initial: np.ndarray | None = None, stop_at: float | None = None,
                 give_up: Callable[[float, Any], str | None] | None = None) -> None:
        self.algorithm = config.algorithm
        self.job = JOBS[config.algorithm](network, data, config=config, cluster=cluster)
        if initial is not None:
            self.job.start_at(initial)
        self.job.finish_at_accuracy = stop_at
        self.job.give_up_when = give_up  # (seconds, evaluation) -> a reason to finish now, or None
        self.start = float(start)
        #: told each evaluation's simulated seconds (from ``start``) and test accuracy while the run goes on
        self.on_evaluation: Callable[[float, float], None] | None = None
        #: told the simulated seconds and steps done, every half second of this machine's time (a progress line)
        self.on_progress: Callable[[float, int], None] | None = None
        self.services: list[Any] = []  # once run: each shard behind its simulated queue (``ShardService``)
        self.full_report = False  # every sample's row per replica in the report, however many replicas

    def run(self) -> dict:
        """Train for the config's steps or simulated seconds (or to ``stop_at``), stop, and return the report."""
        c = self.job.config
        done = threading.Event()
        teller = threading.Thread(target=self._tell, args=(done,), name="dbkit-simulation-progress", daemon=True)
        teller.start()
        try:
            self.job.fit(steps=c.steps, seconds=c.seconds, progress=False)
        finally:
            done.set()
            teller.join(5.0)
            session = self.job.runtime
            if session is not None:  # what the shards' queues saw (read before the session closes)
                self.services = session.read(session.shard_services)
            self.job.stop()
        return self.report()

    def _tell(self, done: threading.Event) -> None:
        """``on_evaluation`` for each evaluation so far, and ``on_progress``, every half second of this
        machine's time."""
        told = 0
        while not done.wait(0.5) or told < len(self.job.history):
            rows = self.job.history
            for row in rows[told:]:
                if self.on_evaluation is not None and row.get("test_accuracy") is not None:
                    self.on_evaluation(round(self.start + float(row["t"]), 4), float(row["test_accuracy"]))
            told = len(rows)
            if self.on_progress is not None and not done.is_set():
                self.on_progress(self.virtual_seconds, self.progress())
            if done.is_set():
                return

    def report(self) -> dict:
        """The job's report (``"simulated": true``, its profile), its ``simulation.start`` the run's ``start``."""
        report = self.job.report(full=self.full_report)
        report["simulation"]["start"] = self.start
        return report

    # ---- what a figure reads ---------------------------------------------------------------------
    def parameters(self) -> np.ndarray:
        return self.job.parameters()

    @property
    def history(self) -> list[dict]:
        """The job's history, its ``t`` from the run's ``start``."""
        return [{**row, "t": round(self.start + float(row["t"]), 4)} for row in self.job.history]  # (as events are)

    @property
    def virtual_seconds(self) -> float:
        """Simulated seconds since the replicas started."""
        return self.job.events.now()

    @property
    def state(self) -> str:
        return self.job.state

    @property
    def events(self) -> Any:
        return self.job.events

    @property
    def evaluator(self) -> Any:
        return self.job.evaluator

    def progress(self) -> int:
        return self.job.snapshot().step
