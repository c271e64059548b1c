"""Downpour SGD as a job: shards and replicas on workers (Dask's, or in process), steered while training.

DistBelief Sec. 4.1: many model replicas, each on its own data shard, fetch
parameters from and push gradients to a sharded parameter server,
asynchronously; Adagrad on the shards; warm start with one replica. The job
is composed of three parts that each own their state and lock: ``Placement``
(the shards and partitions), ``Fleet`` (the replicas) and ``Monitor`` (what
each poll of the replicas means); ``Watch`` (``watch.py``) is what the monitor
and heartbeat threads do with them at each tick, ``apply_change``
(``changes.py``) applies a ``set()`` to them, and ``DownpourResources`` is what
the job holds on the cluster, released once. Lock order: the job's ``_steer`` ->
``Fleet.launching`` -> ``Placement._lock`` -> the book's -> the job's ``_lock``.
"""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import FinalState, Job, JobThread, Monitor, job_from_checkpoint, resolve_job
from ..jobs.folders import check_workers_can_write
from ..jobs.machines import new_job, open_session
from ..nn import Network
from ..partition import AlignedLayout
from ..ps import Checkpoint, ShardFigures, read_checkpoint, read_manifest
from ..runtime.protocol import ClusterFactory, Runtime, given_cluster
from ..settings import check
from ..telemetry import Relayout
from ..training.figures import ReplicaFigures
from .changes import apply_change, relayout
from .coordinators import coordinator_class
from .fleet import Fleet
from .placement import Placement, check_layout
from .recovery import JobLink, Recovery, check_layout_of, settings_of
from .replica_kinds import replica_class
from .resources import DownpourResources
from .watch import Watch, WatchLink


class DownpourSGD(Job):
    """Asynchronous Downpour SGD on a cluster: Dask (the default), or in-process workers.

    Parameters
    ----------
    model : str or Network
        A preset name (``mlp``, ``linear``, ``speech``, ``image-local``) or a network.
    data : str or Dataset
        A dataset name or path (see ``dbkit.data.load``) or a dataset.
    replicas, shards : int
        Model replicas and parameter shards.
    partitions : int
        Each replica is split into this many partitions on different workers
        (DistBelief Sec. 3); every shard then holds one partition's parameters,
        so ``shards`` must be at least ``partitions``.
    n_fetch, n_push : int
        Each replica fetches every ``n_fetch`` steps and pushes every ``n_push`` steps.
    optimizer : {'sgd', 'adagrad'}
        Update rule on the shards; Adagrad's accumulators live on the shards.
    lr : float
        Learning rate (shards' rule and replicas' local steps).
    warm_start_steps : int
        One replica trains alone this many steps before the others start.
    client, scheduler : optional
        An existing ``distributed.Client`` or a scheduler address; default: a LocalCluster.
    cluster : optional
        Machines that are not Dask's (``dbkit.runtime.InProcessCluster``): the job opens a session on them
        and leaves them running when it stops. Give at most one of ``client``, ``scheduler``, ``cluster``.
    config : RunConfig, optional
        Base settings; keyword arguments (any ``RunConfig`` setting) override it.
    replica_workers, shard_workers : list of str, optional
        Pin replica ``i`` to ``replica_workers[i % len]`` and shards likewise;
        default: spread round-robin over all workers.

    ``set()`` changes ``n_fetch``, ``n_push``, ``lr``, ``optimizer``, ``replicas``,
    ``partitions``, ``shards`` and ``slow_replicas`` (stragglers: ``{replica: factor}``)
    while it trains, and ``warm_start_steps`` before it starts; ``lose_replica()``
    kills one replica's task, as a machine failure would.
    """

    algorithm = "downpour"
    steerable = ("n_fetch", "n_push", "lr", "optimizer", "replicas", "partitions", "shards", "slow_replicas",
                 "replica")
    before_start = ("warm_start_steps",)

    @staticmethod
    def defaults() -> RunConfig:
        """The settings a DownpourSGD starts from (keyword settings change them)."""
        return RunConfig.make(algorithm="downpour", optimizer="adagrad", replicas=2, shards=2)

    def __new__(cls, *args: Any, cluster: Any = None, **settings: Any) -> DownpourSGD:
        return new_job(cls, args, cluster, settings, cls.defaults())  # a dbkit.sim.Cluster: a SimulatedJob

    def __init__(self, model: str | Network = "mlp", data: str | Dataset = "digits", *, client: Any = None,
                 scheduler: str | None = None, cluster: ClusterFactory | None = None, config: RunConfig | None = None,
                 replica_workers: list[str] | None = None, shard_workers: list[str] | None = None,
                 **settings: Any) -> None:
        base = config or self.defaults()
        config, dataset, network = resolve_job("downpour", model, data, base, dict(scheduler=scheduler, **settings))
        self._machines = given_cluster(cluster, client, config.scheduler, config.runtime)
        check_layout(network, config)  # refuses partitions the network or shards cannot take
        super().__init__(config, dataset, network)
        self._client, self._replica_workers, self._shard_workers = client, replica_workers, shard_workers
        self.tag = uuid.uuid4().hex[:10]
        self._res = DownpourResources()
        self._placement: Placement | None = None
        self._fleet: Fleet | None = None
        self._monitor = Monitor()
        self._link = JobLink(self.events, self._failed, self._note_transitions, self._progress)
        self._recovery = Recovery(config.checkpoint_dir, config.checkpoint_every, network.fingerprint(), self._link)
        self._start_from: Checkpoint | None = None
        self._watch: Watch | None = None  # the monitor's and the heartbeat's ticks, once started

    # ---- accessors --------------------------------------------------------------------------
    @property
    def layout(self) -> AlignedLayout:
        """Where the parameters live: partitions, each partition's shards, the server's order."""
        return self._placement.alignment if self._placement is not None else check_layout(self.network,
                                                                                           self.config)[1]

    def parameter_state(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Parameters and Adagrad accumulators gathered from the shards, in the network's order."""
        if self._placement is None or self.stopped:
            raise RuntimeError("parameter_state needs a running job")
        return self._placement.parameter_state()

    def add_replicas(self, k: int = 1) -> list[int]:
        """Start ``k`` more replicas while training runs; returns their numbers."""
        k = check("replicas", k)
        before = set(self._replica_figures())
        self.set(replicas=self.config.replicas + k)
        return sorted(set(self._replica_figures()) - before)

    def remove_replicas(self, k: int = 1) -> list[int]:
        """Stop the ``k`` most recently added replicas (one must remain); returns their numbers."""
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.config.replicas - 1:
            raise ValueError(f"k must be a whole number in [1, {self.config.replicas - 1}] (one replica must "
                             f"remain), got {k!r}")
        live = set(self._fleet.live()) if self._fleet is not None else set()
        self.set(replicas=self.config.replicas - k)
        return sorted(i for i in live if self._replica_figures()[i].state == "removed")

    def lose_replica(self, index: int | None = None) -> int:
        """Kill one replica's task (default: the most recently started) as its machine's death would:
        it ends as ``lost``, the gradient it accumulated is never pushed, and the other replicas train
        on (DistBelief Sec. 4.1: Downpour is robust to machine failures). Returns its number.

        One live replica must remain, and a lost replica is not replaced: ``set(replicas=...)`` adds
        replicas again."""
        with self._steer:
            live = self._fleet.live() if self._fleet is not None and not self.ended else []
            if index is None and live:
                index = live[-1]
            if len(live) < 2 or index not in live:
                raise ValueError(f"lose_replica needs a live replica other than the last one, so that training "
                                 f"goes on (live replicas: {live}), got {index!r}")
            assert self._fleet is not None and index is not None
            self._fleet.crash(index)
            self._note_transitions()
            return index

    def describe(self) -> str:
        c, d = self.config, self.config.downpour
        return (f"downpour: {c.replicas} replica{'s' if c.replicas != 1 else ''}"
                + (f" of {d.partitions} partitions each" if d.partitions > 1 else "")
                + f", {c.shards} shard{'s' if c.shards != 1 else ''}"
                + f", n_fetch={d.n_fetch}, n_push={d.n_push}, {c.rule_text()}"
                + (f", warm start {d.warm_start_steps} steps" if d.warm_start_steps else "")
                + (f", slow {dict(c.slow_replicas)}" if c.slow_replicas else ""))

    # ---- the hooks of Job --------------------------------------------------------------------
    def _launch(self, paused: bool) -> None:
        c, net = self.config, self.network
        cluster = self._res.cluster = open_session(c, self._machines, self._client, self.tag)
        workers = cluster.workers() or cluster.wait_for_workers(1)
        if c.checkpoint_dir is not None:  # each shard writes its own file, from its worker
            check_workers_can_write(cluster, c.checkpoint_dir)
        self.dashboard = cluster.dashboard_link()
        placement = self._placement = self._res.placement = Placement(cluster, net, c, self._shard_workers or workers,
                                                                      self._replica_workers or workers)
        ckpt = self._start_from
        if ckpt is None:
            placement.place_shards(net.init_params(c.seed), c.rule(), c.shard_lr())
        else:
            a = placement.alignment
            same_rule = ckpt.optimizer == c.optimizer
            placement.place_shards(a.from_server(ckpt.params), c.rule(), c.shard_lr(),
                                   a.from_server(ckpt.opt_state) if same_rule and ckpt.opt_state is not None
                                   else None, versions=ckpt.manifest.versions)
        fleet = self._fleet = self._res.fleet = Fleet(cluster, placement, net, self.data, c, self.tag)
        self._sample(evaluate=True)  # the history starts from the untrained model
        self._monitor.evaluated(0, self.events.now(), c.eval_every)
        self._monitor.hurry(self.events.now())
        fleet.start(c.replicas, warm_start=c.downpour.warm_start_steps > 0, paused=paused)
        link = WatchLink(self.events, lambda: self.config, lambda: self.ended, lambda: self.stopped,
                         self._check_connection, self._sample, self._diverged, self._failed, self.sample_every)
        self._watch = Watch(fleet, placement, self._monitor, self._recovery, cluster, link)
        self._res.monitor = JobThread(self, DownpourSGD._tick, "dbkit-downpour-monitor", on_error=Job._thread_failed)
        self._res.monitor.start()
        self._res.heartbeat = JobThread(self, DownpourSGD._pulse, "dbkit-downpour-heartbeat",
                                        on_error=Job._thread_failed)
        self._res.heartbeat.start()

    def _tick(self) -> float | None:  # the monitor thread's body (it holds the job weakly between ticks)
        return self._watch.tick() if self._watch is not None else None

    def _pulse(self) -> float | None:  # the heartbeat thread's body
        return self._watch.pulse() if self._watch is not None else None

    def _note_transitions(self) -> None:
        if self._watch is not None:
            self._watch.note_transitions()

    def _resources(self) -> DownpourResources:
        return self._res

    def _cluster(self) -> Runtime | None:
        return self._res.cluster

    def _read_shards(self) -> tuple[ShardFigures, ...]:
        return tuple(self._placement.shard_figures()) if self._placement is not None else ()

    def _cap(self, steps: int | None) -> int | None:
        assert self._fleet is not None
        self._monitor.aim_at(self._fleet.set_caps(steps))
        self._monitor.hurry(self.events.now())
        return self._monitor.target

    def _hold(self, paused: bool) -> None:
        assert self._fleet is not None
        self._fleet.hold(paused)

    def _progress(self) -> int:
        return self._fleet.total_steps() if self._fleet is not None else 0

    def _refresh(self) -> None:
        fleet = self._fleet
        if fleet is not None and not self.stopped:
            fleet.poll(settle=False)

    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        return self._fleet.figures() if self._fleet is not None else {}

    def _parameters(self) -> np.ndarray:
        if self._placement is None:
            return self.network.init_params(self.config.seed)
        return self._placement.parameters()

    def _check(self, config: RunConfig) -> None:
        check_layout(self.network, config)
        loop = replica_class(config.downpour.replica)
        if loop.coordinator_name is not None:  # refused before any replica is replaced
            coordinator_class(loop.coordinator_name)
        known = self._fleet.known() if self._fleet is not None else set(range(config.replicas))
        bad = sorted(i for i, _ in config.slow_replicas if i not in known)
        if bad:
            raise ValueError(f"slow_replicas names replica {bad[0]}, which this job does not have "
                             f"(its replicas: {sorted(known)})")

    def _new_like(self, config: RunConfig) -> DownpourSGD:
        return DownpourSGD(self.network, self.data, client=self._client, cluster=self._machines, config=config,
                           replica_workers=self._replica_workers, shard_workers=self._shard_workers)

    def _apply(self, changes: dict[str, Any], new: RunConfig) -> None:
        assert self._fleet is not None and self._placement is not None
        apply_change(changes, self.config, new, self._fleet, self._placement,
                     functools.partial(relayout, self.config, new, self._fleet, self._placement, self._recovery,
                                       self._link))
        self._note_transitions()
        self._monitor.hurry(self.events.now())

    def _gather(self, stopping: bool) -> FinalState:
        fleet, placement, cluster = self._fleet, self._placement, self._res.cluster
        assert fleet is not None and placement is not None and cluster is not None
        if stopping:
            if self._res.monitor is not None:
                self._res.monitor.halt()
            fleet.stop_all()
            self._note_transitions()
        params = placement.parameters()
        shards = tuple(placement.shard_figures())
        info = {"kind": cluster.kind, "workers": cluster.workers(),
                "shard_workers": [s.worker for s in shards]}
        return FinalState(params, tuple(f for _, f in sorted(fleet.figures().items())), shards, info)

    def _report_blocks(self, final: FinalState) -> dict:
        a = self.layout
        exchange = self._placement.parts.boundary_exchange() if self._placement else None
        return {"layout": {"partitions": a.partitions, "shards_of_partition": [list(s) for s in a.shards_of],
                           "boundary_exchange": exchange,
                           "relayouts": [e.to_dict() for e in self.events.of(Relayout)]},
                "faults": self._recovery.figures(self._placement.last_read.lost if self._placement else {})}

    # ---- checkpoints (issue #13) --------------------------------------------------------------
    def checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write every shard's checkpoint (parameters, Adagrad state, version) and the manifest into
        the folder ``path``; ``DownpourSGD.from_checkpoint(path)`` trains on from it."""
        with self._steer:
            if self._placement is None or self.stopped:
                raise RuntimeError("checkpoint() needs a job that has started and not been stopped")
            if self._recovery.save(self._placement, self.config, str(path)) is None:
                raise RuntimeError(f"a parameter shard did not answer: no complete checkpoint in {path}")
        return Path(path)

    def start_from(self, path: str | os.PathLike[str]) -> DownpourSGD:
        """Start (when started) from the checkpoint in ``path``: its parameters, optimizer state and
        versions. Refuses, before anything starts, a checkpoint that is corrupt, truncated, of another
        model or of another layout (shards, partitions). Returns the job."""
        if self._state != "created":
            raise RuntimeError("start_from() must be called before the job starts")
        ckpt = read_checkpoint(path, self.network.fingerprint())
        check_layout_of(ckpt, self.layout)
        self._start_from = ckpt
        return self

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str], model: str | Network | None = None,
                        data: str | Dataset | None = None, *, client: Any = None, scheduler: str | None = None,
                        cluster: ClusterFactory | None = None, **settings: Any) -> DownpourSGD:
        """A job (not started) that trains on from the checkpoint in ``path``, with the settings it was
        saved with (model, data, replicas, shards, ...) changed by ``settings``."""
        saved = settings_of(read_manifest(path))
        where = dict(client=client, scheduler=scheduler, cluster=cluster)
        return job_from_checkpoint(cls, path, saved, model, data, where, settings)
