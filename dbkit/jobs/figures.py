"""What every job shows, whatever drives it: its state, history, replicas, shards, parameters and
the JSON report of DESIGN.md, read through the hooks each algorithm fills in (``JobHooks``).

``JobFigures`` is the part of ``dbkit.jobs.Job`` that only reads and records:
samples of the replicas' figures, evaluations, and what the driver last knew
when nothing answers (a lost scheduler). ``Job`` (``job.py``) adds how a job
is driven: start, fit, pause, resume, set, stop. The lock order is in
``job.py``'s docstring.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..nn import Network
from ..ps import ShardFigures
from ..telemetry import EventStream, RunRecord, Sample, Sampler, build_report, history
from ..training.evaluate import Evaluation, Evaluator
from ..training.figures import ReplicaFigures
from .hooks import JobHooks
from .last_known import LastKnown
from .snapshot import FinalState, Simulated
from .stopwatch import Stopwatch

ENDED = ("finished", "diverged", "failed", "stopped")
NAN = float("nan")


class JobFigures(JobHooks):
    """A job's state and figures, and its report; see the module docstring."""

    algorithm: ClassVar[str] = ""

    def __init__(self, config: RunConfig, data: Dataset, network: Network) -> None:
        self.config, self.data, self.network = config, data, network
        self.evaluator = Evaluator(network, data, seed=config.seed)
        self.events = EventStream()
        self._state = "created"
        # lock order: after the parts' locks, before the event stream's (state, config, latest figures)
        self._lock = threading.RLock()
        # lock order: after Job._steer and the algorithm's own outer lock (Fleet.launching, SyncSGD's step
        # lock), before the parts it reads (Placement, the book, a simulation's run lock) and _lock (one sample
        # at a time)
        self._sampler, self._sample_lock = Sampler(), threading.Lock()
        self._clock = Stopwatch()  # seconds spent training (running, not paused)
        self._wall0 = time.perf_counter()
        self._final: FinalState | None = None  # the figures kept once the job stopped
        self._last_eval: Evaluation | None = None
        self._last_eval_step = -1
        self._known = LastKnown()  # what a report shows when nothing answers (a lost scheduler)
        #: the Dask dashboard's address once started on a cluster that serves one
        self.dashboard: str | None = None
        #: a test accuracy at which the job finishes, at the evaluation that reaches it (``None``: it trains on)
        self.finish_at_accuracy: float | None = None
        #: told each evaluation (the job's seconds, the evaluation); a reason it returns finishes the job with it
        #: (a figure gives up on a run stuck at chance: ``dbkit.sim.figures.fig4.AtChance``)
        self.give_up_when: Callable[[float, Evaluation], str | None] | None = None

    @property
    def state(self) -> str:
        """created, running, paused, finished, diverged, failed or stopped."""
        return self._state

    @property
    def ended(self) -> bool:
        """Training is over (finished, diverged, failed or stopped); ``stop()`` still frees the cluster."""
        return self._state in ENDED

    # ---- figures -----------------------------------------------------------------------------
    @property
    def history(self) -> list[dict]:
        """One row per evaluation: ``t, step, examples, train_loss, test_loss, test_accuracy, replicas``."""
        return history(self.events)

    def replicas(self) -> list[ReplicaFigures]:
        """Every replica's latest figures (steps, pushes, fetches, state, worker, ...), asked afresh."""
        if self._final is None:
            self._refresh()
        return self._known_replicas()

    def _known_replicas(self) -> list[ReplicaFigures]:
        """The replicas' figures as of the last poll (no call to Dask)."""
        final = self._final
        return list(final.replicas) if final is not None else [f for _, f in sorted(self._replica_figures().items())]

    def _refresh(self) -> None:
        """Bring the replicas' figures up to date now (the monitor's last poll may be a moment old)."""

    def shards(self) -> list[ShardFigures]:
        """Every parameter shard's figures (updates, staleness, bytes, worker); asks the shards."""
        return list(self._final.shards if self._final is not None else self._gather_now().shards)

    def parameters(self) -> np.ndarray:
        """The current parameters, a copy in the network's order."""
        return self._final.params.copy() if self._final is not None else self._parameters()

    def evaluate(self) -> Evaluation:
        """Losses and accuracy of the current parameters, with ``full_batch_loss``."""
        return self.evaluator.final(self.parameters())

    def report(self, full: bool = False) -> dict:
        """The JSON report of DESIGN.md for this run so far (also after ``stop()``), in any state.

        When the shards or the scheduler do not answer, the report holds what the
        driver last knew (parameters as last evaluated, the last shard figures) and
        says so in ``last_known``. Beyond :data:`SAMPLE_ROWS` replicas, each sample in ``events``
        gives its totals without a row per replica (``replica_rows``: ``"summarised"``; a 500-replica
        report would otherwise run to tens of megabytes); ``full`` keeps every row. The final table,
        ``replicas``, is always whole.
        """
        last_known: str | None = None
        final = self._final
        if final is None:
            try:
                final = self._known_final() if self._known.lost is not None else self._gather_now()
            except Exception as e:  # noqa: BLE001 - a report is always possible
                final, last_known = self._known_final(), f"{type(e).__name__}: {e}"
        if self._known.lost is not None:
            last_known = self._known.lost
        fields = self._runtime_fields()
        wall, train = time.perf_counter() - self._wall0, self._clock.seconds
        if fields.get("simulated"):  # the seconds of a simulated cluster's clock
            wall = train = fields["simulation"]["virtual_seconds"]
        record = RunRecord(
            algorithm=self.algorithm, state=self._state, config=self.config.to_dict(),
            wall_seconds=wall, train_seconds=train,
            final=self._evaluate(final.params, final=True), history=self.history, replicas=final.replicas,
            shards=final.shards, bytes=self._bytes(final),
            model={"name": self.network.name, "parameters": self.network.size,
                   "layers": [layer.describe() for layer in self.network.layers]},
            dataset=self.data.summary(), cluster=final.cluster,
            events=summarise_samples(self.events.to_dicts(), len(final.replicas), full),
            extra=self._report_blocks(final), steps=self._progress(),
            ended=self._known.lost or (self._state if self.ended else None))
        report = build_report(record)
        report["replica_rows"] = "full" if full or len(final.replicas) <= SAMPLE_ROWS else "summarised"
        cluster = self._cluster()
        scale = cluster.bytes_scale if cluster is not None else 1.0
        if scale != 1.0:  # a cost-only simulation: its stand-in's bytes, as the costed model's
            for k in ("fetched", "pushed"):
                report["bytes"][k] = int(report["bytes"][k] * scale)
        report.update(fields)
        if last_known is not None:
            report["last_known"] = last_known
        return report

    def _runtime_fields(self) -> dict:
        """What the job's runtime adds to its report (a simulated cluster: ``simulated``, its profile)."""
        cluster = self._cluster()
        return cluster.report_fields() if cluster is not None else {}

    def _simulation(self) -> Simulated | None:
        """A simulated cluster's profile, machines and clocks (before it starts: its profile and machines;
        ``None``: real machines)."""
        cluster = self._cluster()
        if cluster is None:
            return self._machines.simulation() if self._machines is not None else None
        return cluster.simulation()

    def _gather_now(self) -> FinalState:
        """``_gather`` without stopping; remembers the shard figures it read."""
        final = self._gather(stopping=False)
        self._known.read_shards(final.shards)
        return final

    def _known_final(self) -> FinalState:
        """What the driver knew without asking anyone (see ``LastKnown``)."""
        cluster = self._cluster()
        return self._known.final(self.network.init_params(self.config.seed), tuple(self._known_replicas()),
                                 cluster.kind if cluster is not None else "none")

    def _sample(self, evaluate: bool = False, step: int | None = None) -> Sample:
        """Append a ``Sample`` of the replicas' figures, with an evaluation if asked, at ``step`` (default: the
        steps done)."""
        with self._sample_lock:
            evaluation = None
            if evaluate:
                params = self._parameters()
                self._known.evaluated(params)
                evaluation = self._evaluate(params)
                try:
                    self._known.read_shards(self._read_shards())
                except Exception:  # noqa: BLE001 - figures are never worth failing a sample for
                    pass
            step = self._progress() if step is None else step
            if evaluation is not None:
                self._last_eval, self._last_eval_step = evaluation, step
            sample = self._sampler.emit(self.events, self._replica_figures(), evaluation, step=step)
        target = self.finish_at_accuracy
        if evaluation is not None and target is not None and evaluation.test_accuracy >= target:
            self._reached(target)
        elif evaluation is not None and self.give_up_when is not None:
            reason = self.give_up_when(self.events.now(), evaluation)
            if reason:
                self._gave_up(reason)
        return sample

    def _evaluate(self, params: np.ndarray, final: bool = False) -> Evaluation:
        """The evaluation of ``params`` (NaN where the runtime's accuracy means nothing: a cost-only simulation)."""
        cluster = self._cluster()
        if cluster is not None and not cluster.accuracy_known:
            return Evaluation(NAN, NAN, NAN, NAN if final else None)
        return self.evaluator.final(params) if final else self.evaluator(params)

    def _reached(self, accuracy: float) -> None:
        """The job reached ``finish_at_accuracy``: it finishes (a simulated cluster's time stands still there)."""

    def _gave_up(self, reason: str) -> None:
        """``give_up_when`` gave ``reason``: the job finishes, saying why."""


SAMPLE_ROWS = 48
"""Replicas up to which a report's samples keep a row per replica (beyond: their totals only, unless asked)."""


def summarise_samples(events: list[dict], replicas: int, full: bool) -> list[dict]:
    """``events`` with each ``Sample``'s per-replica rows left out when there are over :data:`SAMPLE_ROWS`
    replicas and not ``full`` (the sample's totals, ``live_replicas`` among them, stay)."""
    if full or replicas <= SAMPLE_ROWS:
        return events
    return [{**e, "replicas": []} if e.get("type") == "Sample" else e for e in events]
