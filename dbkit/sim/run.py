"""What every simulated job shares: its simulation and machines, a virtual-time event stream,
evaluations, and the same JSON report a real run writes, marked simulated.

A simulated report is ``dbkit.telemetry.build_report``'s, so one reader serves
real and simulated runs, with ``"simulated": true``, its ``"profile"`` and a
``"simulation"`` block (machines, shard queues, virtual and real seconds).
Its ``wall_seconds``, ``train_seconds`` and ``t`` are virtual seconds.
"""

from __future__ import annotations

import dataclasses
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..nn import Network
from ..ps import ShardFigures
from ..runtime.sim.cost import CostModel
from ..runtime.sim.engine import Simulation
from ..runtime.sim.gradient_batch import GradientBatch
from ..runtime.sim.layout import Cluster, Layout
from ..runtime.sim.shape import ModelShape
from ..runtime.sim.shard_service import ShardService
from ..runtime.sim.sync import Parking
from ..telemetry import ByteCounts, EventStream, RunRecord, Sampler, StateChange, build_report, history
from ..training.evaluate import Evaluation, Evaluator
from ..training.figures import ReplicaFigures

NAN = float("nan")


class SimulatedRun(ABC):
    """One simulated training run of ``config`` on ``cluster``.

    ``start`` shifts its clock (a run that goes on from a warm start begins at
    the warm start's end); ``initial`` gives its starting parameters (network
    order; default: the network's seeded initialisation); ``shape`` the model
    whose arithmetic and bytes the cost model charges (default: the network's own).
    ``cost_only``: ``network`` is a small stand-in that keeps the classes running, and every message,
    shard service and replica update is charged for ``shape``'s parameters; the report holds no accuracy
    (its evaluations are null) and says ``"cost_only": true``.
    """

    algorithm: ClassVar[str] = ""

    def __init__(self, config: RunConfig, network: Network, data: Dataset, cluster: Cluster, *,
                 start: float = 0.0, initial: np.ndarray | None = None, shape: ModelShape | None = None,
                 jitter: str = "none", cost_only: bool = False, stop_at: float | None = None,
                 stack_gradients: bool = True, events: EventStream | None = None,
                 on_state: Callable[[str, str], None] | None = None) -> None:
        self.config, self.network, self.data, self.cluster = config, network, data, cluster
        self.sim = Simulation()
        # gradients due together computed as one stack (the same numbers; off: each as it is asked for)
        self.gradients = GradientBatch() if stack_gradients and not cost_only else None
        self.shape = shape or ModelShape.of(network)
        self.cost_only = cost_only
        self.stop_at = stop_at  # a test accuracy at which the run stops (Figs. 4 and 5: time to an accuracy)
        #: told each evaluation's virtual seconds and test accuracy (the figures' progress lines)
        self.on_evaluation: Callable[[float, float], None] | None = None
        self.float_scale = self.shape.parameters / network.size if cost_only else 1.0
        self.cost = CostModel(cluster.spec, self.shape)
        self.start, self.jitter = float(start), jitter
        self.initial = network.init_params(config.seed) if initial is None else np.asarray(initial, np.float32)
        # t from the warm start's 0; a job's run writes to its job's stream (whose clock reads this simulation)
        self.events = events if events is not None else EventStream(clock=lambda: self.start + self.sim.now,
                                                                    origin=0.0)
        # A job's run (``on_state`` given) has no budget of its own: its driver caps it (``cap``: the
        # steps, Sandblaster's iterations, it may reach; tasks beyond it park) and is told of its
        # endings instead of the run saying them in the event stream.
        self.on_state = on_state
        self.cap = math.inf
        self.parking = Parking(self.sim)
        self.stopping = False
        self.last_evaluation: Evaluation | None = None
        self.sampler = Sampler()
        self.evaluator = Evaluator(network, data, seed=config.seed)
        self.state = "created"
        self.reason = ""
        self.layout: Layout | None = None
        self.services: list[ShardService] = []
        self._real_seconds = 0.0
        self.last_eval_step = -1  # the step of the last evaluation (the job reads it; the run writes it)

    # ---- what each algorithm fills in ----------------------------------------------------------
    @abstractmethod
    def _launch(self) -> None:
        """Place shards and replicas and spawn their tasks (before the simulation runs)."""

    @abstractmethod
    def parameters(self) -> np.ndarray:
        """The current parameters, network order."""

    @abstractmethod
    def replica_figures(self) -> dict[int, ReplicaFigures]:
        ...

    @abstractmethod
    def progress(self) -> int:
        """Steps (Sandblaster: iterations) done so far."""

    def _blocks(self) -> dict:
        """The algorithm's own blocks of the report."""
        return {}

    def _bytes(self) -> ByteCounts:
        counts = ByteCounts.of(self.replica_figures().values())
        if self.cost_only:  # the stand-in's bytes, as the costed model's
            counts = dataclasses.replace(counts, fetched=int(counts.fetched * self.float_scale),
                                         pushed=int(counts.pushed * self.float_scale))
        return counts

    # ---- running -------------------------------------------------------------------------------
    @property
    def driven(self) -> bool:
        """A job drives this run (``dbkit.sim.job``): no budget of its own, its endings told to the job."""
        return self.on_state is not None

    def run(self) -> dict:
        """Simulate the whole run (its ``steps`` or virtual ``seconds``) and return its report."""
        began = time.perf_counter()
        self.begin()
        self.sim.run()
        self.end()
        self._real_seconds = time.perf_counter() - began
        return self.report()

    def begin(self) -> None:
        """Start: the first sample, then shards and replicas placed and their tasks spawned."""
        self._set_state("running")
        self.sample(evaluate=True)  # the history starts from where the run starts
        self._launch()

    def end(self) -> None:
        """The last evaluation (unless the last sample was one), and ``finished`` if nothing ended it."""
        if self.last_eval_step != self.progress():
            self.sample(evaluate=True)
        if self.state == "running":
            self._set_state("finished")

    def set_cap(self, cap: float) -> None:
        """A driven run may go on to ``cap`` steps (``math.inf``: no cap); parked tasks look again."""
        self.cap = cap
        self.parking.release()

    @property
    def resting(self) -> bool:
        """A driven run at its cap with nothing to do until its driver moves it: virtual time stands still."""
        return False

    def begun(self) -> int:
        """Steps (Sandblaster: iterations) begun so far: what ``cap`` counts."""
        return self.progress()

    def change(self, changes: dict[str, Any], new: RunConfig) -> None:
        """``set(...)``'s ``changes`` (``new``: the config after them), at this instant: ``configure(new)``."""
        self.configure(new)

    def configure(self, config: RunConfig) -> None:
        """Take the steerable settings of ``config`` (a driven run's ``set``); nothing by default."""

    def stop(self) -> None:
        """A driven run's end: its tasks finish what they hold and end."""
        self.stopping = True
        self.parking.release()

    def fail(self, reason: str) -> None:
        """The simulation itself broke (a task's error escaped it): the run ends failed."""
        if self.state == "running":
            self._set_state("failed", reason)

    def add_real_seconds(self, seconds: float) -> None:
        """Time this machine spent simulating (a driven run is simulated in slices)."""
        self._real_seconds += seconds

    def _set_state(self, state: str, reason: str = "") -> None:
        self.state, self.reason = state, reason
        if self.on_state is not None:
            self.on_state(state, reason)
        else:
            self.events.emit(StateChange, state=state, reason=reason)

    def _evaluate(self, final: bool = False) -> Evaluation:
        if self.cost_only:  # the stand-in's accuracy says nothing about the model costed
            return Evaluation(NAN, NAN, NAN, NAN if final else None)
        return self.evaluator.final(self.parameters()) if final else self.evaluator(self.parameters())

    def sample(self, evaluate: bool = False, figures: dict[int, ReplicaFigures] | None = None) -> None:
        """A ``Sample`` of the replicas' ``figures`` (default: read now), with an evaluation if asked."""
        evaluation = self._evaluate() if evaluate else None
        if evaluate:
            self.last_eval_step = self.progress()
            self.last_evaluation = evaluation
        self.sampler.emit(self.events, self.replica_figures() if figures is None else figures, evaluation,
                          step=self.progress())
        if evaluation is not None and self.on_evaluation is not None:
            self.on_evaluation(self.sim.now, evaluation.test_accuracy)
        if (evaluation is not None and self.stop_at is not None and self.state == "running"
                and evaluation.test_accuracy >= self.stop_at):
            self._set_state("finished", f"test accuracy reached {self.stop_at:g}")

    @property
    def history(self) -> list[dict]:
        return history(self.events)

    def shard_figures(self) -> list[ShardFigures]:
        assert self.layout is not None
        return [dataclasses.replace(s.shard.figures(), worker=s.machine.name) for s in self.services]

    # ---- the report ----------------------------------------------------------------------------
    def report(self, state: str | None = None, config: RunConfig | None = None) -> dict:
        """The JSON report of a real run of the same settings, with ``simulated``, ``profile`` and ``simulation``
        (``state`` and ``config``: a driven run's job's own, when they differ from the run's)."""
        now = self.sim.now
        state = state or self.state
        replicas = tuple(f for _, f in sorted(self.replica_figures().items()))
        record = RunRecord(
            algorithm=self.algorithm, state=state, config=(config or self.config).to_dict(), wall_seconds=now,
            train_seconds=now, final=self._evaluate(final=True), history=self.history,
            replicas=replicas, shards=tuple(self.shard_figures()), bytes=self._bytes(),
            model=({"name": self.shape.name, "parameters": self.shape.parameters,
                    "layers": [layer.kind for layer in self.shape.layers], "stand_in": self.network.name}
                   if self.cost_only else {"name": self.network.name, "parameters": self.network.size,
                                           "layers": [layer.describe() for layer in self.network.layers]}),
            dataset=self.data.summary(), cluster=self.cluster_block(), events=self.events.to_dicts(),
            extra=self._blocks(), steps=self.progress(),
            ended=state if state not in ("running", "paused", "created") else None)
        report = build_report(record)
        report.update(simulated=True, profile=self.cluster.spec.name, simulation=self._simulation_block(now),
                      cost_only=self.cost_only)
        return report

    def cluster_block(self) -> dict[str, Any]:
        assert self.layout is not None
        return {"kind": "simulated", "workers": [m.name for m in self.layout.machines],
                "shard_workers": [self.layout.machines[m].name for m in self.layout.shard_on]}

    def _simulation_block(self, now: float) -> dict[str, Any]:
        assert self.layout is not None
        spec = self.cluster.spec
        return {
            "profile": spec.name, "profile_description": spec.description, "virtual_seconds": now,
            "start": self.start, "real_seconds": self._real_seconds, "events": self.sim.events,
            "stacked_gradients": self.gradients.stacked if self.gradients else 0,
            "model_shape": {"name": self.shape.name, "parameters": self.shape.parameters},
            "machines": [{"name": m.name, "roles": m.roles, "cores": m.cores.n,
                          "utilisation": round(m.utilisation(now), 4), "bytes_sent": m.bytes_sent,
                          "bytes_received": m.bytes_received} for m in self.layout.machines],
            "shard_queues": [{"shard": i, "served": s.figures.served, "utilisation": round(s.figures.busy / now, 4)
                              if now > 0 else 0.0, "mean_wait": s.figures.mean_wait(),
                              "served_by": dict(s.figures.served_by),
                              "mean_wait_by": {k: s.figures.mean_wait(k) for k in s.figures.served_by},
                              "longest_queue": s.figures.longest_queue} for i, s in enumerate(self.services)],
        }
