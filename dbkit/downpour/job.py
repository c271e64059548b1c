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
import math
import os
import uuid
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import FinalState, Job, Monitor, job_from_checkpoint, resolve_job
from ..jobs.extensions_on_workers import check_extensions_on_workers
from ..jobs.folders import check_workers_can_write
from ..jobs.machines import open_session
from ..nn import Network
from ..partition import AlignedLayout
from ..ps import Checkpoint, ShardFigures, read_checkpoint, read_manifest
from ..ps.update_rule import rule_class
from ..runtime.protocol import ClusterFactory, Runtime, given_cluster
from ..settings import check
from ..telemetry import Relayout
from ..training.figures import ReplicaFigures
from .changes import apply_change, relayout
from .coordinators import coordinator_class
from .fleet import Fleet, batch_figures
from .placement import Placement, check_layout
from .recovery import JobLink, Recovery, check_layout_of, settings_of
from .replica_kinds import replica_class
from .resources import DownpourResources
from .step_budget import StepBudget
from .watch import Watch, WatchLink

T = TypeVar("T")


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
        Machines that are not Dask's (``dbkit.runtime.InProcessCluster``, or a simulated
        ``dbkit.sim.Cluster``, on which it runs in virtual time): the job opens a session on them and
        leaves them running when it stops. Give at most one of ``client``, ``scheduler``, ``cluster``.
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

    def __init__(self, model: str | Network = "mlp", data: str | Dataset = "digits", *, client: Any = None,
                 scheduler: str | None = None, cluster: ClusterFactory | None = None, config: RunConfig | None = None,
                 replica_workers: list[str] | None = None, shard_workers: list[str] | None = None,
                 **settings: Any) -> None:
        base = config or self.defaults()
        config, dataset, network = resolve_job("downpour", model, data, base, dict(scheduler=scheduler, **settings))
        self._machines = given_cluster(cluster, client, config.scheduler, config.runtime, settings.get("runtime"))
        check_layout(network, config)  # refuses partitions the network or shards cannot take
        replica_class(config.downpour.replica).check_settings(config.replicas, config.replica_settings())
        if self._machines is not None:
            self._machines.admit(network, config)
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
        self._fleet_paused = False  # the replicas were told to pause (a simulated cluster holds its time instead)
        self._budget: StepBudget | None = None  # a fit's steps, shared exactly among the replicas

    # ---- accessors --------------------------------------------------------------------------
    @property
    def layout(self) -> AlignedLayout:
        """Where the parameters live: partitions, each partition's shards, the server's order."""
        return self._placement.alignment if self._placement is not None else check_layout(self.network,
                                                                                           self.config)[1]

    def parameter_state(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Parameters and Adagrad accumulators gathered from the shards, in the network's order."""
        placement = self._placement
        if placement is None or self.stopped:
            raise RuntimeError("parameter_state needs a running job")
        return self._read(placement.parameter_state)

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
            fleet = self._fleet
            assert fleet is not None and index is not None
            self._on_cluster(lambda: fleet.crash(index))
            self._note_transitions()
            return index

    def _describe(self) -> str:
        c, d = self.config, self.config.downpour
        return (f"downpour: {c.replicas} replica{'s' if c.replicas != 1 else ''}"
                + (f" of {d.partitions} partitions each" if d.partitions > 1 else "")
                + f", {c.shards} shard{'s' if c.shards != 1 else ''}"
                + f", n_fetch={d.n_fetch}, n_push={d.n_push}, {c.rule_text()}"
                + (f", warm start {d.warm_start_steps} steps" if d.warm_start_steps else "")
                + (f", slow {dict(c.slow_replicas)}" if c.slow_replicas else ""))

    # ---- the hooks of Job --------------------------------------------------------------------
    def _launch(self, paused: bool) -> None:
        cluster = self._res.cluster = open_session(self.config, self._machines, self._client, self.tag,
                                                   network=self.network)
        self.events.use_clock(cluster.time.now)  # (virtual seconds on a simulated cluster)
        self._sample(evaluate=True)  # the history starts from the untrained model (or the checkpoint's)
        self._monitor.evaluated(0, 0.0, self.config.eval_every)
        cluster.call(lambda: self._place(cluster, paused))
        self.events.use_clock(cluster.time.now)  # t counts from the replicas' start
        self._monitor.hurry(self.events.now())
        self._res.monitor = cluster.every(self, DownpourSGD._tick, "dbkit-downpour-monitor",
                                          on_error=Job._thread_failed)
        self._res.heartbeat = cluster.every(self, DownpourSGD._pulse, "dbkit-downpour-heartbeat",
                                            on_error=Job._thread_failed)

    def _place(self, cluster: Runtime, paused: bool) -> None:
        """Shards, then replicas, on ``cluster`` (at a simulated instant on a simulated one)."""
        c, net = self.config, self.network
        workers = cluster.workers() or cluster.wait_for_workers(1)
        if c.checkpoint_dir is not None:  # each shard writes its own file, from its worker
            check_workers_can_write(cluster, c.checkpoint_dir)
        # a rule or loop of one's own: importable where it runs
        check_extensions_on_workers(cluster, [rule_class(c.optimizer), replica_class(c.downpour.replica)])
        self.dashboard = cluster.dashboard_link()
        shard_workers = self._shard_workers or cluster.shard_places(c.shards) or workers
        replica_workers = (self._replica_workers or cluster.replica_places(0, c.replicas, c.downpour.partitions)
                           or workers)
        placement = self._placement = self._res.placement = Placement(cluster, net, c, shard_workers, replica_workers)
        ckpt = self._start_from
        if ckpt is None:
            placement.place_shards(self._initial(), c.rule(), c.shard_lr())
        else:
            a = placement.alignment
            same_rule = ckpt.optimizer == c.optimizer
            placement.place_shards(a.from_server(ckpt.params), c.rule(), c.shard_lr(),
                                   a.from_server(ckpt.opt_state) if same_rule and ckpt.opt_state is not None
                                   else None, versions=ckpt.manifest.versions)
        fleet = self._fleet = self._res.fleet = Fleet(cluster, placement, net, self.data, c, self.tag)
        cluster.hold(paused)  # (a simulated cluster's time stands still too)
        self._fleet_paused = paused  # replicas start paused when the job starts so: the first fit caps them first
        # a fit's steps kept exactly on every runtime, shared among the replicas (#48: a cap of N each ran R x N)
        self._budget = StepBudget(fleet, cluster.time.now, real_time=not cluster.holds_time)
        if cluster.holds_time:  # virtual time: polls aimed at the next evaluation
            self._monitor.aim_polls()
        fleet.start(c.replicas, warm_start=c.downpour.warm_start_steps > 0, paused=paused)
        link = WatchLink(self.events, lambda: self.config, lambda: self.ended, lambda: self.stopped,
                         self._check_connection, self._sample, self._diverged, self._failed, self.sample_every)
        self._watch = Watch(fleet, placement, self._monitor, self._recovery, cluster, link)

    def _tick(self) -> float | None:  # the monitor's body (it holds the job weakly between ticks)
        if self._watch is None:
            return None
        wait = self._watch.tick()
        if self._budget is not None and not self.ended:
            self._budget.review(self._progress(), held=self._fleet_paused)
            self._monitor.waypoint = self._budget.waypoint
        target, cluster = self._monitor.target, self._res.cluster
        if cluster is not None and (self.ended or (target is not None and self._progress() >= target)):
            cluster.rest()  # ended, or at a fit's step target: a simulated cluster's time stands still there
        return wait

    def _pulse(self) -> float | None:  # the heartbeat's body
        return self._watch.pulse() if self._watch is not None else None

    def _note_transitions(self) -> None:
        if self._watch is not None:
            self._watch.note_transitions()

    def _resources(self) -> DownpourResources:
        return self._res

    def _cluster(self) -> Runtime | None:
        return self._res.cluster

    def _read_shards(self) -> tuple[ShardFigures, ...]:
        placement = self._placement
        return tuple(self._read(placement.shard_figures)) if placement is not None else ()

    def _cap(self, steps: int | None) -> int | None:
        fleet, budget = self._fleet, self._budget
        assert fleet is not None
        assert budget is not None
        self._read(lambda: fleet.poll(settle=False))  # exactly ``steps`` more over all replicas
        target = None if steps is None else fleet.total_steps() + steps
        self._on_cluster(lambda: budget.aim(math.inf if target is None else target))
        self._monitor.aim_at(target)
        self._monitor.hurry(self.events.now())
        return self._monitor.target

    def _hold(self, paused: bool) -> None:
        fleet, cluster = self._fleet, self._res.cluster
        assert fleet is not None and cluster is not None
        cluster.hold(paused)
        # virtual time stands still, the replicas with it: they are told only to leave the pause they began in
        if not cluster.holds_time or (self._fleet_paused and not paused):
            self._on_cluster(lambda: fleet.hold(paused))
            self._fleet_paused = paused
        if paused:
            self._refresh()  # the replicas' figures where they stopped

    def _progress(self) -> int:
        return self._fleet.total_steps() if self._fleet is not None else 0

    def _refresh(self) -> None:
        fleet = self._fleet
        if fleet is not None and not self.stopped:
            self._read(lambda: fleet.poll(settle=False))

    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        figures = self._fleet.figures() if self._fleet is not None else {}
        if self._state == "paused":  # held: as a replica says once it has taken the pause
            return {i: f.but(state="paused") if f.state == "running" else f for i, f in figures.items()}
        return figures

    def _parameters(self) -> np.ndarray:
        placement = self._placement
        if placement is None:  # what the shards will start from
            return self._initial()
        return self._read(placement.parameters)

    def _check(self, config: RunConfig) -> None:
        check_layout(self.network, config)
        loop = replica_class(config.downpour.replica)
        loop.check_settings(config.replicas, config.replica_settings())
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
        fleet, placement, cluster = self._fleet, self._placement, self._res.cluster
        assert fleet is not None and placement is not None and cluster is not None

        def apply() -> None:
            if "replicas" in changes:  # machines of their own for the new replicas, where the machines say so
                k = new.downpour.partitions
                first = len(placement.replica_workers) // k
                places = cluster.replica_places(first, fleet.book.next_index() + new.replicas, k)
                if places:
                    placement.add_replica_workers(places)
            # in virtual time the answer comes once the replicas are told: each takes it at its next step (a
            # straggler's may be simulated seconds away); on real machines, once each has taken it
            apply_change(changes, self.config, new, fleet, placement,
                         functools.partial(relayout, self.config, new, fleet, placement, self._recovery, self._link),
                         acted=0.0 if cluster.holds_time else 10.0)
            if self._budget is not None:
                self._budget.share()
            self._note_transitions()

        self._on_cluster(apply)
        self._monitor.hurry(self.events.now())

    def _gather(self, stopping: bool) -> FinalState:
        return (self._on_cluster if stopping else self._read)(lambda: self._gather_here(stopping))

    def _gather_here(self, stopping: bool) -> FinalState:
        fleet, placement, cluster = self._fleet, self._placement, self._res.cluster
        assert fleet is not None and placement is not None and cluster is not None
        if stopping:
            if self._res.monitor is not None:
                self._res.monitor.halt()
            # the replicas push what they hold: in virtual time, however long a push of a large model takes
            fleet.stop_all(timeout=1e9 if cluster.holds_time else 60.0)
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
                "faults": self._recovery.figures(self._placement.last_read.lost if self._placement else {}),
                "batch": batch_figures(self.config, self.data.n_train,
                                       self._fleet.rows if self._fleet is not None else None)}

    # ---- checkpoints (issue #13) --------------------------------------------------------------
    def checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write every shard's checkpoint (parameters, Adagrad state, version) and the manifest into
        the folder ``path``; ``DownpourSGD.from_checkpoint(path)`` trains on from it."""
        with self._steer:
            if self._placement is None or self.stopped:
                raise RuntimeError("checkpoint() needs a job that has started and not been stopped")
            placement = self._placement
            if self._on_cluster(lambda: self._recovery.save(placement, self.config, str(path))) is None:
                raise RuntimeError(f"a parameter shard did not answer: no complete checkpoint in {path}")
        return Path(path)

    def _initial(self) -> np.ndarray:
        """The parameters the shards start from (network order): a checkpoint's, given ones, or the seed's."""
        if self._start_from is not None:
            return self.layout.from_server(self._start_from.params)
        return self._start_params()

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
