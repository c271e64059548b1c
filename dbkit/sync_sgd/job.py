"""The synchronous SGD baseline as a job: one replica, trained on a background thread.

In memory by default (no Dask is loaded); with ``on_cluster=True`` (or a
``scheduler`` or ``client``) the parameters live on ``shards`` parameter shard
actors, and every step fetches them and pushes its gradient.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import FinalState, Gate, Job, resolve_job
from ..nn import Network
from ..ps import ShardFigures
from ..runtime.every import every_thread
from ..runtime.protocol import ClusterFactory, given_cluster
from ..training.figures import ReplicaFigures
from .trainer import SGDTrainer, TrainingDiverged

_REPLICA_STATE = {"created": "paused", "running": "running", "paused": "paused", "finished": "stopped",
                  "stopped": "stopped", "diverged": "diverged", "failed": "failed"}


class _Resources:
    """What a SyncSGD job holds: its training thread and, on a cluster, the cluster."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.thread: Any = None  # the training loop (a thread, or a task in virtual time)
        self.cluster: Any = None
        self.trainer: SGDTrainer | None = None

    def release(self) -> None:
        self.gate.stop()
        if self.thread is not None:
            self.thread.halt()
        if self.trainer is not None:
            self.trainer.release()  # its actor proxies would keep the shards alive
        if self.cluster is not None:
            self.cluster.close()


class SyncSGD(Job):
    """Plain mini-batch SGD (or Adagrad) on one replica: the baseline every algorithm is compared to.

    Parameters
    ----------
    model : str or Network
        A preset name (``mlp``, ``linear``, ``speech``, ``image-local``) or a network.
    data : str or Dataset
        A dataset name or path (see ``dbkit.data.load``) or a dataset.
    lr, optimizer, batch_size, steps, seconds, seed, eval_every, ...
        Any ``RunConfig`` setting, by name.
    on_cluster : bool
        Keep the parameters on ``shards`` parameter shard actors on a Dask
        cluster (a LocalCluster, or ``scheduler`` / ``client``), or on dbkit's
        own machines given as ``cluster`` (``dbkit.runtime.InProcessCluster``).
    config : RunConfig, optional
        Base settings; keyword arguments override it.

    ``set(lr=..., optimizer=...)`` changes the learning rate and update rule while it trains.
    """

    algorithm = "sgd"
    steerable = ("lr", "optimizer")

    def __init__(self, model: str | Network = "mlp", data: str | Dataset = "digits", *, on_cluster: bool | None = None,
                 client: Any = None, scheduler: str | None = None, cluster: ClusterFactory | None = None,
                 config: RunConfig | None = None, **settings: Any) -> None:
        runtime = settings.get("runtime", config.runtime if config is not None else "dask")
        on_cluster = on_cluster or (True if (client is not None or scheduler or cluster is not None
                                             or runtime != "dask") else None)
        config, dataset, network = resolve_job("sgd", model, data, config,
                                               dict(scheduler=scheduler, on_cluster=on_cluster, **settings))
        self._machines = given_cluster(cluster, client, config.scheduler, config.runtime, settings.get("runtime"))
        if self._machines is not None:
            self._machines.admit(network, config)
        super().__init__(config, dataset, network)
        self._client = client
        self._gate = Gate()
        self._res = _Resources(self._gate)
        self._trainer: SGDTrainer | None = None
        # lock order: after Job._steer, before Job._sample_lock
        self._step_lock = threading.RLock()  # sampling on divergence happens while it is held
        self._last_sample = 0.0

    # ---- the hooks of Job ------------------------------------------------------------------
    def _launch(self, paused: bool) -> None:
        c, net = self.config, self.network
        self._gate.start_paused(paused)
        cluster = None
        if c.sgd.on_cluster:
            from ..jobs.machines import open_session

            cluster = self._res.cluster = open_session(c, self._machines, self._client, "", network=net)
            self.events.use_clock(cluster.time.now)  # (virtual seconds on a simulated cluster)
            self.dashboard = cluster.dashboard_link()
            self._trainer = self._res.trainer = cluster.call(lambda: self._place(cluster))
        else:
            self._trainer = self._res.trainer = SGDTrainer(net, self.data, c.batch_size, c.lr, c.rule(), c.seed)
        self._sample(evaluate=True)  # the history starts from the untrained model
        if cluster is not None:
            self._res.thread = cluster.every(self, SyncSGD._train_once, "dbkit-sgd", on_error=Job._thread_failed)
        else:
            self._res.thread = every_thread(self, SyncSGD._train_once, "dbkit-sgd", on_error=Job._thread_failed)

    def _place(self, cluster: Any) -> SGDTrainer:
        """The shards, and the trainer that fetches from and pushes to them (at a simulated instant on a
        simulated cluster, where its gradients take the driver machine's time)."""
        from ..jobs.extensions_on_workers import check_extensions_on_workers
        from ..ps.update_rule import rule_class
        from ..runtime.shards import start_shards

        c = self.config
        check_extensions_on_workers(cluster, [rule_class(c.optimizer)])  # a rule of one's own: on every worker
        server = start_shards(cluster, self._start_params(), c.shards, c.rule(), c.lr,
                              workers=cluster.shard_places(c.shards))
        return SGDTrainer(cluster.computing(self.network), self.data, c.batch_size, c.lr, c.rule(), c.seed, server)

    def _train_once(self) -> float | None:
        """One step on the training thread (``EveryThread`` calls it with the job)."""
        trainer = self._trainer
        assert trainer is not None
        if not self._gate.open_for(trainer.steps):
            return self._gate.rest_on(self._res.cluster)
        with self._step_lock:
            try:
                trainer.step()
            except TrainingDiverged as e:
                self._sample()
                self._diverged(str(e))
                return None
        now = self.events.now()
        if trainer.steps % self.config.eval_every == 0:
            self._sample(evaluate=True)
            self._last_sample = now
        elif now - self._last_sample >= self.sample_every:
            self._sample()
            self._last_sample = now
        return 0.0

    def _stepping(self) -> Any:
        """The step lock, for what reads or changes the trainer; none in virtual time, where the steps and the
        reads are one thread's and a step may stand half done while time is held (a pause)."""
        cluster = self._res.cluster
        return contextlib.nullcontext() if cluster is not None and cluster.holds_time else self._step_lock

    def _resources(self) -> _Resources:
        return self._res

    def _cluster(self) -> Any:
        return self._res.cluster

    def _read_shards(self) -> tuple[ShardFigures, ...]:
        server = self._trainer.server if self._trainer is not None else None
        return tuple(self._read(server.figures)) if server is not None else ()

    def _cap(self, steps: int | None) -> int | None:
        return self._gate.cap_after(self._progress(), steps)

    def _hold(self, paused: bool) -> None:
        self._gate.hold(paused, self._res.thread, cluster=self._res.cluster)

    def _progress(self) -> int:
        return self._trainer.steps if self._trainer is not None else 0

    def _replica_figures(self) -> dict[int, ReplicaFigures]:
        if self._trainer is None:
            return {}
        with self._stepping():  # its counters change while it steps
            figures = self._trainer.figures()
        return {0: figures.but(state=_REPLICA_STATE[self.state], worker="local")}

    def _parameters(self) -> np.ndarray:
        if self._trainer is None:
            return self.network.init_params(self.config.seed)
        trainer = self._trainer
        with self._stepping():
            return self._read(trainer.current_params)

    def _apply(self, changes: dict[str, Any], new: RunConfig) -> None:
        if self._trainer is None:
            return
        trainer = self._trainer
        with self._stepping():
            if "lr" in changes:
                self._on_cluster(lambda: trainer.set_lr(changes["lr"]))
            if "optimizer" in changes or set(changes) & set(new.rule_settings()):
                self._on_cluster(lambda: trainer.set_optimizer(new.rule()))

    def _gather(self, stopping: bool) -> FinalState:
        if stopping:
            self._gate.stop()
            if self._res.thread is not None:
                self._res.thread.halt()
        params = self._parameters()
        server = self._trainer.server if self._trainer is not None else None
        shards = tuple(self._read(server.figures)) if server is not None else ()
        cluster: dict[str, Any] = {"kind": "none"}
        if self._res.cluster is not None and server is not None:
            cluster = {"kind": self._res.cluster.kind, "workers": self._res.cluster.workers(),
                       "shard_workers": list(server.workers)}
        replicas = tuple(self._replica_figures().values())
        if stopping:
            replicas = tuple(r.but(state="stopped") if r.live else r for r in replicas)
        return FinalState(params, replicas, shards, cluster)

    def _new_like(self, config: RunConfig) -> SyncSGD:
        return SyncSGD(self.network, self.data, client=self._client, cluster=self._machines, config=config)

    def _describe(self) -> str:
        c = self.config
        machines = (type(self._machines).__name__ if self._machines is not None else
                    "in-process workers" if c.runtime == "in-process" else "a Dask cluster")
        where = f"on {c.shards} parameter shard(s) on {machines}" if c.sgd.on_cluster else "in memory"
        return f"sync SGD: one replica, parameters {where}, {c.rule_text()}, batch {c.batch_size}"

