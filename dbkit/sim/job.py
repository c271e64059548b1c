"""A job on a simulated cluster: ``DownpourSGD``, ``SandblasterLBFGS`` or ``SyncSGD`` given
``cluster=dbkit.sim.Cluster(...)`` is one of these, with the same ``Job`` interface.

``start``, ``fit(steps=..., seconds=...)`` (simulated seconds), ``pause``,
``resume``, ``set``, ``stop``, ``events``, ``snapshot()`` and ``report()`` act
on dbkit's own replicas and shards running in virtual time on a
``SimulationDriver``'s thread, as fast as this machine allows. Events carry
simulated time; a change, a lost replica or a pause happens at a simulated
instant between two slices of the simulation. Sync SGD on a simulated cluster
is what it is on Dask's: one replica fetching, computing and pushing in turn
to sharded parameters (``SimulatedDownpour`` with one replica, n = 1, no overlap).

Locks: the job's (``Job``'s order), then the driver's; the driver's thread
calls ``_after_slice`` holding its run lock and takes only ``_published``'s.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import weakref
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import FinalState, Job, Monitor, Simulated, Snapshot, resolve_job
from ..nn import Network
from ..runtime.sim.layout import Cluster
from ..runtime.sim.memory import check_memory
from ..telemetry import EventStream, ReplicaEvent, Sample
from ..training.figures import ReplicaFigures
from .downpour import SimulatedDownpour
from .driver import SimulationDriver, VirtualClock
from .job_run import make_run, run_config
from .run import SimulatedRun

#: what ``set()`` changes while a simulated job trains, and what only before it starts
STEERING: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "downpour": (("n_fetch", "n_push", "lr", "optimizer", "replicas", "slow_replicas", "replica"),
                 ("warm_start_steps", "partitions", "shards")),
    "sandblaster": (("slow_replicas",), ("replicas", "work_unit_size", "backup", "balance", "shards")),
    "sgd": (("lr", "optimizer"), ("shards",)),
}


class _Release:
    """What a simulated job holds: its driver's thread. Refers to the driver, never to the job."""

    def __init__(self, driver: SimulationDriver) -> None:
        self.driver = driver

    def release(self) -> None:
        self.driver.stop()


class SimulatedJob(Job):
    """``algorithm`` (downpour, sandblaster or sgd) on the simulated ``cluster``; see the module docstring.

    Parameters are those of the job classes: ``model``, ``data``, a base ``config`` and flat ``settings``.
    """

    def __init__(self, algorithm: str, model: str | Network, data: str | Dataset, *, cluster: Cluster,
                 config: RunConfig | None = None, **settings: Any) -> None:
        if not isinstance(cluster, Cluster):
            raise TypeError(f"cluster must be a dbkit.sim.Cluster, got {type(cluster).__name__}")
        for name in ("client", "scheduler", "replica_workers", "shard_workers", "checkpoint_dir"):
            if settings.get(name) is not None:
                raise ValueError(f"{name} does not apply to a simulated cluster (it runs no Dask and has no "
                                 "workers to name)")
        settings.pop("on_cluster", None)
        config, dataset, network = resolve_job(algorithm, model, data, config, settings)
        if config.algorithm == "downpour" and config.downpour.partitions > 1:
            from ..downpour.placement import check_layout  # the same refusal as on Dask
            check_layout(network, config)
        check_memory(network.size, config.replicas, config.algorithm, config.sandblaster.memory)
        super().__init__(config, dataset, network)
        self.algorithm = algorithm  # type: ignore[misc]
        self.steerable, self.before_start = STEERING[algorithm]  # type: ignore[misc]
        self.cluster = cluster
        # lock order: leaf (the figures published after each slice)
        self._published = threading.Lock()
        self._figures: dict[int, ReplicaFigures] = {}
        self._steps = 0
        self._monitor = Monitor()
        self._wall_sample = 0.0
        clock = VirtualClock()
        self.events = EventStream(clock=clock, origin=0.0)
        make = functools.partial(make_run, config, network, dataset, cluster, self.events, _weakly(self._run_state))
        self._driver = SimulationDriver(make, self._slice_done, clock)

    # ---- what a simulated job adds -------------------------------------------------------------
    @property
    def simulation(self) -> Simulated:
        """The profile, the machines, and simulated against real seconds so far."""
        spec = self.cluster.spec
        run = self._driver.clock.run
        return Simulated(spec.name, self.cluster.machines or spec.machine.machines or None, self.cluster.describe(),
                         run.sim.now if run is not None else 0.0, self._driver.real_seconds)

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(super().snapshot(), simulation=self.simulation)

    def describe(self) -> str:
        c = self.config
        what = {"downpour": f"{c.replicas} replicas, {c.shards} shards, n_fetch={c.downpour.n_fetch}, "
                            f"n_push={c.downpour.n_push}, {c.rule_text()}",
                "sandblaster": f"{c.replicas} replicas, {c.shards} shards",
                "sgd": f"{c.shards} shards, {c.rule_text()}"}[self.algorithm]
        slow = f", slow {dict(c.slow_replicas)}" if c.slow_replicas else ""
        return f"{self.algorithm}: {what}{slow} (simulated, {self.cluster.spec.name})"

    def lose_replica(self, index: int | None = None) -> int:
        """Replica ``index`` (default: the newest) loses its machine at this simulated instant: it ends
        ``lost`` at its next step, its accumulated gradient never pushed (DistBelief Sec. 4.1)."""
        if self.algorithm != "downpour":
            raise ValueError("lose_replica is Downpour's (Sandblaster's lost replicas are its backup tasks' story)")

        def lose(run: SimulatedRun) -> int:
            assert isinstance(run, SimulatedDownpour)
            live = run.live()
            i = live[-1] if index is None and live else index
            if len(live) < 2 or i not in live:
                raise ValueError(f"lose_replica needs a live replica other than the last one, so that training "
                                 f"goes on (live replicas: {live}), got {index!r}")
            assert i is not None
            run.lose(i)
            self._after_slice(run)
            return i

        with self._steer:
            if self._state == "created" or self.ended:
                raise ValueError(f"lose_replica needs a training job; this one is {self._state}")
            return int(self._driver.call(lose))

    # ---- the driver's thread, after every slice ------------------------------------------------
    def _after_slice(self, run: SimulatedRun, force: bool = True) -> None:
        """Publish the run's progress; its replicas' figures (hundreds of histograms: not every slice) and
        a sample of them every ``sample_every`` real seconds of simulating, or at once when ``force``d."""
        with self._published:
            self._steps = run.progress()
            if run.last_evaluation is not None:
                self._last_eval, self._last_eval_step = run.last_evaluation, run.last_eval_step
        due = self._driver.real_seconds - self._wall_sample >= self.sample_every
        if not (force or due or (not self._figures and run.progress() > 0)):  # (the first replicas' figures)
            return
        figures = run.replica_figures()
        with self._published:
            self._figures = figures
        for index, what, f in self._monitor.transitions(figures):
            self.events.emit(ReplicaEvent, replica=index, what=what, worker=f.worker, reason=f.error)
        if due:
            self._wall_sample = self._driver.real_seconds
            run.sample(figures=figures)

    def _slice_done(self, run: SimulatedRun) -> None:
        """The driver's call after every slice."""
        self._after_slice(run, force=False)

    def _run_state(self, state: str, reason: str) -> None:
        """The run says it ended (or began: ignored, the job says that itself)."""
        if state == "diverged":
            self._diverged(reason)
        elif state == "failed":
            self._failed("the simulation", RuntimeError(reason))
        elif state == "finished":
            self._set_state("finished", reason)

    # ---- the hooks of Job ----------------------------------------------------------------------
    def _launch(self, paused: bool) -> None:
        self._driver.start(held=True)
        self._after_slice(self._driver.clock.run)  # type: ignore[arg-type]
        if not paused:
            self._driver.hold(False)

    def _resources(self) -> _Release:
        return _Release(self._driver)

    def _cap(self, steps: int | None) -> int | None:
        def cap(run: SimulatedRun) -> int | None:
            target = None if steps is None else run.begun() + steps
            run.set_cap(math.inf if target is None else target)
            return target

        if steps is None:
            self._driver.run_until(math.inf)
        return self._driver.call(cap)

    def _cap_seconds(self, seconds: float | None, begin: float) -> None:
        if seconds is None:
            return  # (``_cap`` lifts the limit)
        run = self._driver.clock.run  # its simulation's clock is the job's less the run's start
        self._driver.run_until(begin + seconds - (run.start if run is not None else 0.0))

    def _seconds(self) -> float:
        return self._driver.clock()

    def _seconds_done(self, begin: float, seconds: float) -> bool:
        return self._driver.at_limit  # the driver stopped virtual time exactly at the fit's end

    def _hold(self, paused: bool) -> None:
        self._driver.hold(paused)
        if paused and self._driver.clock.run is not None:  # its figures as they are where time stands still
            self._driver.read(self._after_slice)

    def _progress(self) -> int:
        with self._published:
            return self._steps

    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        with self._published:
            figures = dict(self._figures)
        if self._state == "paused":  # held where simulated time stands still, as a real replica holds when paused
            return {i: f.but(state="paused") if f.state == "running" else f for i, f in figures.items()}
        return figures

    def _parameters(self) -> np.ndarray:
        if self._driver.clock.run is None:
            return self.network.init_params(self.config.seed)
        return self._driver.read(lambda run: run.parameters())

    def _sample(self, evaluate: bool = False) -> Sample:
        def sample(run: SimulatedRun) -> Sample:
            run.sample(evaluate=evaluate)
            self._after_slice(run)
            last = self.events.last(Sample)
            assert last is not None
            return last

        if self._driver.thread.is_alive():
            return self._driver.call(sample)
        return self._driver.read(sample)

    def _gather(self, stopping: bool) -> FinalState:
        run = self._driver.clock.run
        if run is None:
            return FinalState(self.network.init_params(self.config.seed), (), (), {"kind": "simulated"})

        def gather(run: SimulatedRun) -> FinalState:
            if stopping:
                run.stop()
                run.sim.run_for(30.0)  # the replicas push what they hold, then have nothing left to do
                self._after_slice(run)
            return FinalState(run.parameters(), tuple(f for _, f in sorted(run.replica_figures().items())),
                              tuple(run.shard_figures()), run.cluster_block())

        return self._driver.call(gather) if self._driver.thread.is_alive() else self._driver.read(gather)

    def _apply(self, changes: dict[str, Any], new: RunConfig) -> None:
        def apply(run: SimulatedRun) -> None:
            run.change(changes, run_config(new) if new.algorithm == "sgd" else new)
            self._after_slice(run)  # its figures say so at once

        self._driver.call(apply)

    def _new_like(self, config: RunConfig) -> SimulatedJob:
        return SimulatedJob(self.algorithm, self.network, self.data, cluster=self.cluster, config=config)

    def report(self) -> dict:
        """The JSON report of a real run of the same settings, marked ``simulated`` with its profile;
        ``wall_seconds`` and ``train_seconds`` are simulated seconds."""
        if self._driver.clock.run is None:
            return super().report()
        state, config = self._state, self.config
        return self._driver.read(lambda run: run.report(state=state, config=config))


def _weakly(method: Any) -> Any:
    """``method`` called through a weak reference to its object (a no-op once the object is gone)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any) -> Any:
        m = ref()
        return m(*args) if m is not None else None
    return call
