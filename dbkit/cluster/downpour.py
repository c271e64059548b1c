"""The Downpour SGD driver: shards and replicas on Dask workers, steered while training.

DistBelief Sec. 4.1: many model replicas, each on its own data shard, fetch
parameters from and push gradients to a sharded parameter server,
asynchronously; Adagrad on the shards; warm start with one replica.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid

import numpy as np

from ..algorithms import Evaluator
from ..config import RunConfig
from ..data import Dataset, shard_indices
from ..nn import Network
from .downpour_layout import PartitionedLayout
from .downpour_state import ReplicaBook
from .job_setup import resolve_job
from .monitor import Monitor
from .progress import NO_CAP
from .replica_task import ReplicaControl, run_replica
from .session import Cluster
from .shards import handles_of
from .steering import ChangeInProgress, Steering

__all__ = ["ChangeInProgress", "DownpourSGD"]



class DownpourSGD(Steering, PartitionedLayout):
    """Asynchronous Downpour SGD on a Dask cluster.

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
    config : RunConfig, optional
        Base settings; keyword arguments override it. Other settings
        (``batch_size``, ``l2``, ``hidden``, ``seed``, ``eval_every``, ``workers``) go in ``settings``.
    replica_workers, shard_workers : list of str, optional
        Pin replica ``i`` to ``replica_workers[i % len]`` and shards likewise;
        default: spread round-robin over all workers.
    """

    name = "downpour"

    def __init__(self, model: str | Network = "mlp", data: str | Dataset = "digits", replicas: int | None = None,
                 shards: int | None = None, partitions: int | None = None, n_fetch: int | None = None, n_push: int | None = None,
                 optimizer: str | None = None, lr: float | None = None, warm_start_steps: int | None = None,
                 client=None, scheduler: str | None = None, config: RunConfig | None = None,
                 replica_workers: list[str] | None = None, shard_workers: list[str] | None = None,
                 **settings) -> None:
        given = dict(replicas=replicas, shards=shards, partitions=partitions, n_fetch=n_fetch, n_push=n_push, optimizer=optimizer,
                     lr=lr, warm_start_steps=warm_start_steps, scheduler=scheduler, **settings)
        base = config or RunConfig(algorithm="downpour", optimizer="adagrad", replicas=2, shards=2)
        self.config, self.data, self.network = resolve_job("downpour", model, data, base, given)
        c = self.config
        self.alignment = self._check_layout(c)  # refuses partitions the network or shards cannot take
        self.evaluator = Evaluator(self.network, self.data, seed=c.seed)
        self._client, self._replica_workers, self._shard_workers = client, replica_workers, shard_workers
        self.cluster: Cluster | None = None
        self.server = None
        self.book = ReplicaBook()
        self.history: list[dict] = []
        self._controls: dict[str, object] = {}
        self._parts = shard_indices(self.data.n_train, c.replicas, seed=c.seed)
        self._change = threading.Lock()
        self._launching = threading.RLock()
        self._monitor: Monitor | None = None
        self._cap = NO_CAP
        self._final: dict | None = None
        self._layout_lock = threading.RLock()
        self._generation = 0
        self._shard_names: list[str] = []
        self._partition_names: dict[int, list[str]] = {}
        self._floats_per_example = 0
        self._paused = False
        self.layouts: list[dict] = []  # every re-layout: when, and to what
        self.started = self.stopped = False
        self._t0 = 0.0
        self.tag = uuid.uuid4().hex[:10]

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> "DownpourSGD":
        """Place shards and replicas and start training (non-blocking)."""
        if self.stopped:
            raise RuntimeError("this DownpourSGD was stopped; make a new one")
        if self.started:
            return self
        c = self.config
        self.cluster = Cluster(scheduler=c.scheduler, client=self._client, n_workers=c.workers)
        try:
            workers = self.cluster.workers()
            if not workers:
                self.cluster.wait_for_workers(1)
                workers = self.cluster.workers()
            self._shard_workers = self._shard_workers or workers
            self._replica_workers = self._replica_workers or workers
            self.server = self._place_shards(self.alignment, self.network.init_params(c.seed))
            self.started = True
            self._t0 = time.perf_counter()
            self.record_eval()  # the history starts from the untrained model
            first = 1 if c.warm_start_steps > 0 else c.replicas
            for i in range(first):
                self._launch(i)
            self.book.pending_warm = list(range(first, c.replicas))
            self.book.clock_start()
            self._monitor = Monitor(self)
            self._monitor.start()
        except BaseException:
            self._teardown()
            raise
        return self

    def _control(self, worker: str):
        if worker not in self._controls:
            self._controls[worker] = self.cluster.place_actor(f"control-{len(self._controls)}", ReplicaControl,
                                                              worker=worker)
        return self._controls[worker]

    def _launch(self, index: int) -> None:
        c = self.config
        partitioned = self.alignment.partitions > 1
        # a partitioned replica's own task runs beside its partition 0
        worker = (self._partition_workers(index)[0] if partitioned
                  else self._replica_workers[index % len(self._replica_workers)])
        control = self._control(worker)
        cap = NO_CAP if self._cap == NO_CAP else max(0, self._cap - self.total_steps())
        settings = {"n_fetch": c.n_fetch, "n_push": c.n_push, "lr": c.lr, "paused": self._paused, "stop": False,
                    "max_steps": cap}
        control.register(index, settings).result()
        key = f"dbkit-replica-{index}-{self.tag}"
        if partitioned:  # the partitions hold the data and talk to the shards
            parts = self._place_partitions(index)
            future = self.cluster.submit_on(worker, run_replica, index, str(control.key), None, None, None, None,
                                            c.batch_size, c.seed + index, partitions=parts,
                                            floats_per_example=self._floats_per_example, key=key)
        else:
            part = self._parts[index % len(self._parts)]
            future = self.cluster.submit_on(
                worker, run_replica, index, str(control.key), self.network, self.data.X_train[part],
                self.data.y_train[part], handles_of(self.server), c.batch_size, c.seed + index, key=key)
        self.book.add(index, worker, future)

    def stop(self) -> None:
        """Stop every replica (they push what they accumulated), keep the final figures, release everything."""
        if not self.started or self.stopped:
            return
        try:
            self._broadcast(stop=True)
            self.book.wait_all(timeout=60)
            self.book.clock_stop()
            self._final = {"params": self.current_params(), "shards": self.server.stats(),
                           "shard_workers": list(self.server.workers)}
        finally:
            self._teardown()

    def _teardown(self) -> None:
        self.stopped = True
        if self._monitor is not None:
            self._monitor.stop()
        self.book.cancel_all()
        # Actor proxies hold Futures of their own: drop ours, or a borrowed
        # client would keep the shards and controls alive after stop().
        self.server = None
        self._controls = {}
        if self.cluster is not None:
            self.cluster.close()
        gc.collect()  # proxies and Futures can sit in reference cycles; free them now

    def __enter__(self) -> "DownpourSGD":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- training and figures --------------------------------------------------------------
    def fit(self, steps: int | None = None, seconds: float | None = None, progress: bool = True) -> list[dict]:
        """Train for ``steps`` more steps (over all replicas) or ``seconds``; then pause. Returns the history.

        With one replica, ``steps`` is exact; with several, training stops as
        soon as the replicas together have done at least ``steps``.
        """
        if steps is None and seconds is None:
            steps, seconds = self.config.steps, self.config.seconds
        self.start()
        from .progress import fit_loop

        return fit_loop(self, steps, seconds, progress)

    def total_steps(self) -> int:
        return sum(f.get("steps", 0) for f in self.book.figures().values())

    def current_params(self) -> np.ndarray:
        if self._final is not None:
            return self._final["params"]
        with self._layout_lock:
            return self.alignment.from_server(self.server.fetch())

    def evaluate(self) -> dict:
        """Final-style figures (including ``full_batch_loss``) for the current parameters."""
        return self.evaluator.final(self.current_params())

    def record_eval(self) -> dict:
        row = {"t": round(time.perf_counter() - self._t0, 4), "step": self.total_steps()}
        row.update(self.evaluator(self.current_params()))
        row["replicas"] = self.book.live_count()
        self.history.append(row)
        return row

    def summary(self) -> dict:
        figures = self.book.figures()
        replicas = [{"replica": i, **{k: f.get(k, 0) for k in ("steps", "pushes", "fetches", "examples",
                                                               "rejected", "nonfinite", "failures")},
                     "worker": f.get("worker"), "state": f.get("state"), "error": f.get("error"),
                     **({"partitions": f["partitions"]} if f.get("partitions") else {})}
                    for i, f in sorted(figures.items())]
        shards = self._final["shards"] if self._final is not None else self.server.stats()
        return {
            "algorithm": self.name, "params": self.current_params(),
            "steps": sum(r["steps"] for r in replicas), "examples": sum(r["examples"] for r in replicas),
            "train_seconds": self.book.train_seconds(), "history": list(self.history),
            "replicas": replicas, "shards": shards,
            "bytes": {"fetched": sum(f.get("bytes_fetched", 0) for f in figures.values()),
                      "pushed": sum(f.get("bytes_pushed", 0) for f in figures.values()),
                      "between_partitions": sum(f.get("bytes_between_partitions", 0) for f in figures.values()),
                      "between_partitions_min": sum(f.get("bytes_between_partitions_min", 0)
                                                    for f in figures.values())},
        }

    def _shard_placement(self) -> list[str]:
        if self._final is not None:
            return self._final["shard_workers"]
        return list(self.server.workers) if self.server is not None else []

    def report(self) -> dict:
        """The JSON report of DESIGN.md for this run so far."""
        from ..telemetry import build_report

        s = self.summary()
        extra = {"dataset": self.data.summary(),
                 "model": {"name": self.network.name, "parameters": self.network.size,
                           "layers": [layer.describe() for layer in self.network.layers]},
                 "cluster": {"kind": self.cluster.kind if self.cluster else "none",
                             "shard_workers": self._shard_placement()},
                 "layout": {"partitions": self.alignment.partitions,
                            "shards_of_partition": [list(s) for s in self.alignment.shards_of],
                            "relayouts": list(self.layouts)}}
        return build_report(s, self.config.to_dict(), self.evaluator.final(s["params"]),
                            time.perf_counter() - self._t0, extra)
