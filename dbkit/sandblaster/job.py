"""Sandblaster L-BFGS as a job: shards, replicas and the coordinator on a cluster (Dask, or in process).

DistBelief Sec. 4.2. The coordinator (``dbkit.sandblaster.LBFGSCoordinator``)
runs on a thread of this process and talks to the shards in commands and
scalars; batch gradients are computed by replicas on the workers, unit by
unit (``UnitBatch``), with load balancing and backup copies. It pauses
between L-BFGS iterations; settings change between batches.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import FinalState, Gate, Job, job_from_checkpoint, resolve_job
from ..jobs.folders import check_workers_can_write
from ..jobs.heartbeat import Heartbeat, drop_hung, late_by_worker, note_late, workers_of_shards
from ..jobs.machines import open_session
from ..nn import Network
from ..ps import ShardFigures, balanced_layout
from ..ps.checkpoint import writable
from ..ps.vector_checkpoint import VectorState
from ..runtime.protocol import ClusterFactory, Runtime, given_cluster
from ..runtime.shards import start_shards
from ..telemetry import ByteCounts, faults_block, sandblaster_block
from ..training.figures import ReplicaFigures
from .batch import UnitBatch
from .changes import apply_change, batch_done, check_change
from .coordinator import CoordinatorState, Iteration, LBFGSCoordinator
from .dispatcher import UnitDispatcher
from .recovery import SandblasterCheckpoints
from .replica_actors import ReplicaActors
from .resources import SandblasterResources
from .work_units import default_unit_size


class SandblasterLBFGS(Job):
    """Batch L-BFGS with the batch gradient spread over replicas in work units.

    Parameters
    ----------
    model, data : str, Network or Dataset
        As for ``DownpourSGD``. ``linear`` with ``l2 > 0`` is strictly convex.
    replicas, shards : int
    memory, iterations : int
        L-BFGS history pairs kept on the shards; at most this many iterations.
    work_unit_size : int
        Examples per work unit; 0 picks about a tenth of ``n_train / replicas``.
    backup, balance : bool
        Backup copies of running units near the end of a batch; hand out units
        as replicas become free (False: split them equally up front, for contrast).
    slow_replicas : dict, optional
        ``{replica index: factor}``: make those replicas that many times slower.
    gtol, ftol, push_every
        Stopping rules (see ``LBFGSCoordinator``) and pushes every ``push_every`` units.
    client, scheduler, cluster : optional
        Where it runs, as for ``DownpourSGD``: a ``distributed.Client``, a scheduler address, or dbkit's own
        machines (``dbkit.runtime.InProcessCluster``); default: a LocalCluster.

    ``fit(steps=N)`` runs N more iterations; ``set()`` changes ``replicas``,
    ``work_unit_size``, ``backup``, ``balance`` and ``slow_replicas`` between batches.
    """

    algorithm = "sandblaster"
    steerable = ("replicas", "work_unit_size", "backup", "balance", "slow_replicas")

    @staticmethod
    def defaults() -> RunConfig:
        """The settings a SandblasterLBFGS starts from (keyword settings change them)."""
        return RunConfig.make(algorithm="sandblaster", model="linear", replicas=3, shards=2, l2=1e-3)

    def __init__(self, model: str | Network = "linear", data: str | Dataset = "digits", *, client: Any = None,
                 scheduler: str | None = None, cluster: ClusterFactory | None = None, config: RunConfig | None = None,
                 replica_workers: list[str] | None = None, shard_workers: list[str] | None = None,
                 **settings: Any) -> None:
        base = config or self.defaults()
        config, dataset, network = resolve_job("sandblaster", model, data, base, dict(scheduler=scheduler, **settings))
        self._machines = given_cluster(cluster, client, config.scheduler, config.runtime, settings.get("runtime"))
        if self._machines is not None:
            self._machines.admit(network, config)
        super().__init__(config, dataset, network)
        self._client, self._replica_workers, self._shard_workers = client, replica_workers, shard_workers
        self._replicas: ReplicaActors | None = None  # the replicas' state actors, once started
        self._gate = Gate()
        self._res = SandblasterResources(self._gate)
        self._batch: UnitBatch | None = None
        self._coordinator: LBFGSCoordinator | None = None
        #: the iterations a driver sees done: one counts once its sample is taken (a fit's cap is then reached
        #: after the history's row, whatever the driver's thread and the coordinator's happen to interleave)
        self._shown = 0
        self._start_from: tuple[CoordinatorState, list[VectorState]] | None = None
        self._checkpoints: SandblasterCheckpoints | None = None
        res = self._res  # (pings in the runtime's time: virtual seconds on a simulated cluster; see Placement)
        self._heartbeat = self._res.pings = Heartbeat(  # the heartbeat thread's only
            config.heartbeat_timeout, clock=lambda: res.cluster.time.now() if res.cluster is not None else 0.0)
        if config.checkpoint_dir is not None:
            writable(config.checkpoint_dir)
            self._checkpoints = SandblasterCheckpoints(config.checkpoint_dir, config.checkpoint_every,
                                                       network.fingerprint(), self.events)

    @property
    def unit_size(self) -> int:
        c = self.config
        return c.sandblaster.work_unit_size or default_unit_size(self.data.n_train, c.replicas)

    @property
    def dispatcher(self) -> UnitDispatcher:
        """Who computed which work units so far: ``units_done``, ``backups_issued``, ``lost`` ..."""
        if self._batch is None:
            raise RuntimeError("the job has not started")
        return self._batch.dispatcher

    @property
    def iterations(self) -> list[Iteration]:
        """The coordinator's rows: loss, gradient norm, step length per L-BFGS iteration."""
        return list(self._coordinator.rows) if self._coordinator is not None else []

    def batch_gradient(self, vector: str = "params") -> tuple[float, np.ndarray]:
        """One batch gradient by work units at shard vector ``vector``: ``(loss, gradient)``.

        For a paused job (L-BFGS waits between iterations meanwhile)."""
        server = self._res.server
        if self._batch is None or server is None or self.state not in ("paused", "finished"):
            raise RuntimeError(f"batch_gradient needs a started, paused job; this one is {self.state}")
        batch = self._batch
        return self._on_cluster(lambda: (batch(vector), server.fetch_vector("acc")))

    def _new_like(self, config: RunConfig) -> SandblasterLBFGS:
        return SandblasterLBFGS(self.network, self.data, client=self._client, cluster=self._machines, config=config,
                                replica_workers=self._replica_workers, shard_workers=self._shard_workers)

    def _describe(self) -> str:
        c, s = self.config, self.config.sandblaster
        units = math.ceil(self.data.n_train / self.unit_size)
        return (f"sandblaster: {c.replicas} replicas, {c.shards} shards, memory {s.memory}, {units} work units of "
                f"{self.unit_size} examples (and one L2 unit) per batch, backups {'on' if s.backup else 'off'}"
                + (f", slow {dict(c.slow_replicas)}" if c.slow_replicas else ""))

    # ---- the hooks of Job --------------------------------------------------------------------
    def _launch(self, paused: bool) -> None:
        c = self.config
        self._gate.start_paused(paused)
        per_worker = max(1, math.ceil(c.replicas / c.workers))
        cluster = self._res.cluster = open_session(c, self._machines, self._client, "", per_worker, self.network)
        self.events.use_clock(cluster.time.now)  # (virtual seconds on a simulated cluster)
        cluster.call(lambda: self._place(cluster))
        self._sample(evaluate=True)  # the history starts from the parameters it starts from
        self._res.thread = cluster.every(self, SandblasterLBFGS._iterate, "dbkit-sandblaster",
                                         on_error=Job._thread_failed)
        self._res.heartbeat = cluster.every(self, SandblasterLBFGS._pulse, "dbkit-sandblaster-heartbeat",
                                            on_error=Job._thread_failed)

    def _place(self, cluster: Runtime) -> None:
        """Shards, replicas' state, the batch and the coordinator (at a simulated instant on a simulated one)."""
        c, s = self.config, self.config.sandblaster
        workers = cluster.workers() or cluster.wait_for_workers(1)
        if c.checkpoint_dir is not None:  # each shard writes its own file, from its worker
            check_workers_can_write(cluster, c.checkpoint_dir)
        self.dashboard = cluster.dashboard_link()
        replica_workers = self._replica_workers or cluster.replica_places(0, c.replicas, 1) or workers
        self._replicas = ReplicaActors(cluster, replica_workers, self.events)
        saved = self._start_from
        initial = np.concatenate([v.vectors["params"] for v in saved[1]]) if saved else self._start_params()
        shard_workers = self._shard_workers or cluster.shard_places(c.shards) or workers
        self._res.server = start_shards(cluster, initial, c.shards, "sgd", 1.0, workers=shard_workers)
        if saved:
            self._res.server.load_vectors(saved[1])
        slow = dict(c.slow_replicas)
        slots = [self._replicas.place(i, slow.get(i, 1.0)) for i in range(c.replicas)]
        self._batch = self._res.batch = UnitBatch(
            cluster, self.network, self.data.X_train, self.data.y_train, self._res.server, slots,
            {sl.index: self._replicas.key(sl.index) for sl in slots}, self.unit_size, s.push_every, s.backup,
            s.balance, self._gate, on_batch=self._batch_done, clock=self.events.now)
        self._replicas.check_threads(self.dispatcher.live())
        self._coordinator = self._res.coordinator = LBFGSCoordinator(self._res.server, self._batch, s.memory,
                                                                     s.iterations, s.gtol, s.ftol,
                                                                     clock=self.events.now)
        if saved:
            self._coordinator.restore(saved[0])
        self._shown = max(0, len(self._coordinator.rows) - 1)

    def _iterate(self) -> float | None:
        """One L-BFGS iteration on the coordinator's thread (``EveryThread`` calls it with the job)."""
        coordinator = self._coordinator
        assert coordinator is not None
        if not self._gate.open_for(self._progress()):
            return self._gate.rest_on(self._res.cluster)
        try:
            row = coordinator.begin() if not coordinator.rows else coordinator.iterate()
            if row is None:
                self._set_state("finished", coordinator.stop_reason)
                return None
            self._sample(evaluate=True, step=row.iteration)
            self._shown = row.iteration
            ckpt, server = self._checkpoints, self._res.server
            if ckpt is not None and server is not None and ckpt.due(self.events.now()):
                ckpt.save(server, coordinator.state(), self.events.now(), self.config.to_dict())
        except FloatingPointError as e:
            self._diverged(str(e))
            return None
        except Exception:  # a shard's worker died: back to the last checkpoint, redo what came after
            if self._restore_lost_shards():
                return 0.0
            raise
        return 0.0

    def _pulse(self) -> float | None:
        """One beat of the heartbeat thread: a shard silent for ``heartbeat_timeout`` has its worker dropped
        from the scheduler, so that the coordinator's calls to it fail now and the shards come back from
        the checkpoint (``_restore_lost_shards``) instead of when the machine wakes."""
        server, cluster = self._res.server, self._res.cluster
        if cluster is None or self.stopped:
            return None
        if server is not None and not self.ended and cluster.lost(0) is None:
            silent = self._heartbeat.beat_shards(server)
            if silent:
                drop_hung(cluster, self.events, workers_of_shards(server, silent), self.config.heartbeat_timeout)
            note_late(self.events, late_by_worker(self._heartbeat.answered_late(), dict(enumerate(server.workers))))
        return self._heartbeat.period / 2

    def start_from(self, path: str | os.PathLike[str]) -> SandblasterLBFGS:
        """Start (when started) from the Sandblaster checkpoint in ``path``: the shards' parameters,
        gradient and history, and the coordinator at the checkpoint's iteration. Refuses, before
        anything starts, one that is corrupt, of another model or of another number of shards."""
        if self._state != "created":
            raise RuntimeError("start_from() must be called before the job starts")
        ckpt = SandblasterCheckpoints(os.fspath(path), self.config.checkpoint_every, self.network.fingerprint())
        self._start_from = ckpt.load(list(balanced_layout(self.network.size, self.config.shards).ranges))
        return self

    def checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write a whole checkpoint into the folder ``path`` now: every shard's parameters, gradient and
        L-BFGS history, and the coordinator's state. Taken between iterations, so the job must be
        paused (or finished); ``SandblasterLBFGS.from_checkpoint(path)`` goes on from it."""
        server, coordinator = self._res.server, self._coordinator
        if server is None or coordinator is None or not coordinator.rows or self.stopped:
            raise RuntimeError("checkpoint() needs a job that has done its first batch and not been stopped")
        if self.state == "running":
            raise RuntimeError("checkpoint() is taken between iterations: pause() the job first")
        writable(os.fspath(path))
        ckpt = SandblasterCheckpoints(os.fspath(path), self.config.checkpoint_every, self.network.fingerprint(),
                                      self.events)
        self._on_cluster(lambda: ckpt.save(server, coordinator.state(), self.events.now(), self.config.to_dict()))
        return Path(path)

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], model: str | Network | None = None,
                        data: str | Dataset | None = None, *, client: Any = None, scheduler: str | None = None,
                        cluster: ClusterFactory | None = None, **settings: Any) -> SandblasterLBFGS:
        """A job (not started) that goes on from the checkpoint in ``path`` with the settings it was
        saved with (model, data, replicas, shards, ...), changed by ``settings``."""
        saved = SandblasterCheckpoints.settings(path)
        where = dict(client=client, scheduler=scheduler, cluster=cluster)
        return job_from_checkpoint(cls, path, saved, model, data, where, settings)

    def _restore_lost_shards(self) -> bool:
        """Bring lost shards back from the last checkpoint (``SandblasterCheckpoints.bring_back``);
        True if it did, and the coordinator redoes the iterations since."""
        ckpt, cluster, server, batch, coordinator = (self._checkpoints, self._res.cluster, self._res.server,
                                                     self._batch, self._coordinator)
        if ckpt is None or cluster is None or server is None or batch is None or coordinator is None \
                or self._known.lost is not None:
            return False
        new = ckpt.bring_back(cluster, server, self._shard_workers, batch, coordinator)
        if new is None:
            return False
        self._res.server = new
        self._shown = max(0, len(coordinator.rows) - 1)
        return True

    def _batch_done(self, d: UnitDispatcher, seconds: float) -> None:
        batch_done(self.events, d, seconds)

    def _resources(self) -> SandblasterResources:
        return self._res

    def _cluster(self) -> Runtime | None:
        return self._res.cluster

    def _read_shards(self) -> tuple[ShardFigures, ...]:
        server = self._res.server
        return tuple(self._read(server.figures)) if server is not None else ()

    def _cap(self, steps: int | None) -> int | None:
        return self._gate.cap_after(self._progress(), steps)

    def _hold(self, paused: bool) -> None:
        self._gate.hold(paused, self._res.thread, cluster=self._res.cluster)

    def _progress(self) -> int:
        return self._shown

    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        if self._batch is None:
            return {}
        d, state = self._batch.dispatcher, {"running": "running", "paused": "paused"}.get(self.state, "stopped")
        return {s.index: ReplicaFigures(s.index, s.worker, state if s.alive else "lost", steps=d.units_done[s.index],
                                        examples=d.examples_done[s.index], failures=int(not s.alive))
                for s in d.slots}

    def _parameters(self) -> np.ndarray:
        server = self._res.server
        if server is None:
            return self._start_params()
        return self._read(server.fetch)

    def _check(self, config: RunConfig) -> None:
        check_change(self.config, config, self._batch)

    def _apply(self, changes: dict[str, Any], new: RunConfig) -> None:
        batch = self._batch
        assert batch is not None
        self._on_cluster(lambda: apply_change(changes, new, batch, self._replicas, self.data.n_train))

    def _gather(self, stopping: bool) -> FinalState:
        cluster, server = self._res.cluster, self._res.server
        assert cluster is not None and server is not None
        if stopping:
            self._gate.stop()
            if self._res.thread is not None:
                self._res.thread.halt()
        actors = self._replicas
        own = (self._on_cluster(lambda: actors.pushes_and_fetches(self.dispatcher.live()))
               if actors is not None and self._batch is not None else {})
        replicas = tuple(f.but(pushes=own.get(i, (0, 0))[0], fetches=own.get(i, (0, 0))[1],
                               state="stopped" if stopping and f.live else f.state)
                         for i, f in sorted(self._replica_figures().items()))
        params, shards = self._read(lambda: (server.fetch(), tuple(server.figures())))
        return FinalState(params, replicas, shards,
                          {"kind": cluster.kind, "workers": cluster.workers(), "shard_workers": list(server.workers)})

    def _bytes(self, final: FinalState) -> ByteCounts:
        return ByteCounts(sum(s.bytes_fetched for s in final.shards), sum(s.bytes_pushed for s in final.shards))

    def _report_blocks(self, final: FinalState) -> dict:
        b = self._batch
        return {**sandblaster_block(self._coordinator, b.dispatcher if b is not None else None,
                                    b.batch_seconds if b is not None else [], self.unit_size),
                "faults": faults_block(self.events, self.config.checkpoint_dir)}
