"""The Sandblaster L-BFGS driver: shards, replicas and the coordinator on a Dask cluster.

DistBelief Sec. 4.2. The coordinator (``dbkit.algorithms.LBFGSCoordinator``)
runs in this process and talks to the shards in commands and scalars; batch
gradients are computed by replicas on the workers, unit by unit
(``DaskBatch``), with load balancing and backup copies.
"""

from __future__ import annotations

import gc
import math
import time
import warnings

import numpy as np

from ..algorithms import Evaluator
from ..algorithms.sandblaster import LBFGSCoordinator
from ..config import RunConfig
from ..data import Dataset
from ..nn import Network
from .job_setup import resolve_job
from .sandblaster_batch import DaskBatch, Slot
from .session import Cluster
from .shards import start_shards
from .work_unit_task import SandblasterReplica


class SandblasterLBFGS:
    """Batch L-BFGS with the batch gradient spread over replicas in work units.

    Parameters
    ----------
    model, data : str, Network or Dataset
        As for ``DownpourSGD``. ``linear`` with ``l2 > 0`` is strictly convex.
    replicas, shards : int
    memory : int
        L-BFGS history pairs kept on the shards.
    max_iterations : int
    work_unit_size : int
        Examples per work unit; 0 picks about a tenth of ``n_train / replicas``.
    backup : bool
        Schedule backup copies of running units near the end of a batch.
    slow_replicas : dict, optional
        ``{replica index: factor}``: make those replicas that many times slower.
    balance : bool
        Hand out units as replicas become free (True) or split them equally up front (False, for contrast).
    gtol, ftol : float
        Stopping rules (see ``LBFGSCoordinator``).
    """

    name = "sandblaster"

    def __init__(self, model: str | Network = "linear", data: str | Dataset = "digits", replicas: int | None = None,
                 shards: int | None = None, memory: int | None = None, max_iterations: int | None = None,
                 work_unit_size: int | None = None, backup: bool | None = None, client=None,
                 scheduler: str | None = None, config: RunConfig | None = None, slow_replicas: dict | None = None,
                 balance: bool | None = None, replica_workers: list[str] | None = None,
                 shard_workers: list[str] | None = None, gtol: float = 1e-5, ftol: float = 1e-9,
                 push_every: int = 4, **settings) -> None:
        given = dict(replicas=replicas, shards=shards, memory=memory, iterations=max_iterations,
                     work_unit_size=work_unit_size, backup=backup, balance=balance, scheduler=scheduler,
                     slow_replicas=tuple((slow_replicas or {}).items()) if slow_replicas is not None else None,
                     **settings)
        base = config or RunConfig(algorithm="sandblaster", model="linear", replicas=3, shards=2, l2=1e-3)
        self.config, self.data, self.network = resolve_job("sandblaster", model, data, base, given)
        c = self.config
        self.unit_size = c.work_unit_size or max(1, self.data.n_train // (10 * c.replicas))
        self.gtol, self.ftol, self.push_every = gtol, ftol, push_every
        self.evaluator = Evaluator(self.network, self.data, seed=c.seed)
        self._client, self._replica_workers, self._shard_workers = client, replica_workers, shard_workers
        self.cluster = self.server = self.batch = self.coordinator = None
        self.history: list[dict] = []
        self._final = None
        self.started = self.stopped = False
        self._t0 = 0.0

    def start(self) -> "SandblasterLBFGS":
        if self.stopped:
            raise RuntimeError("this SandblasterLBFGS was stopped; make a new one")
        if self.started:
            return self
        c = self.config
        per_worker = max(1, math.ceil(c.replicas / c.workers))
        self.cluster = Cluster(scheduler=c.scheduler, client=self._client, n_workers=c.workers,
                               threads_per_worker=per_worker)
        try:
            workers = self.cluster.workers()
            shard_workers = self._shard_workers or workers
            replica_workers = self._replica_workers or workers
            self.server = start_shards(self.cluster, self.network.init_params(c.seed), c.shards, "sgd", 1.0,
                                       workers=shard_workers)
            self._check_threads(replica_workers)
            slow = dict(c.slow_replicas)
            slots = []
            for i in range(c.replicas):
                w = replica_workers[i % len(replica_workers)]
                proxy = self.cluster.place_actor(f"sandblaster-replica-{i}", SandblasterReplica, i,
                                                 slow.get(i, 1.0), worker=w)
                slots.append(Slot(i, w, str(proxy.key)))
            self.batch = DaskBatch(self.cluster, self.network, self.data.X_train, self.data.y_train, self.server,
                                   slots, self.unit_size, self.push_every, c.backup, c.balance)
            self.started = True
            self._t0 = time.perf_counter()
        except BaseException:
            self.stop()
            raise
        return self

    def _check_threads(self, replica_workers: list[str]) -> None:
        """Warn when replicas sharing a worker outnumber its threads: they would queue, not run at once."""
        nthreads = self.cluster.client.nthreads()
        wanted: dict[str, int] = {}
        for i in range(self.config.replicas):
            w = replica_workers[i % len(replica_workers)]
            wanted[w] = wanted.get(w, 0) + 1
        short = {w: (n, nthreads.get(w, 0)) for w, n in wanted.items() if n > nthreads.get(w, 0)}
        if short:
            warnings.warn(f"replicas per worker exceed the worker's threads {short} (replicas, threads): "
                          "those replicas will wait for each other; start workers with more threads "
                          "(dask worker --nthreads)", UserWarning, stacklevel=3)

    def fit(self, progress: bool = True) -> list[dict]:
        """Run L-BFGS until a stopping rule holds; returns the history (one row per iteration)."""
        self.start()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.config.iterations, unit="it", desc="sandblaster", leave=False)

        def on_iteration(row: dict) -> None:
            params = self.server.fetch()  # the driver evaluates; the coordinator never sees vectors
            ev = self.evaluator(params)
            self.history.append({"t": round(time.perf_counter() - self._t0, 4), "step": row["iteration"],
                                 "train_loss": row["loss"], "test_accuracy": ev["test_accuracy"],
                                 "test_loss": ev["test_loss"], "grad_norm": row["grad_norm"],
                                 "line_search_step": row["step"], "evaluations": row["evaluations"]})
            if bar is not None:
                bar.update(1 if row["iteration"] else 0)
                bar.set_postfix(loss=f"{row['loss']:.4f}", gnorm=f"{row['grad_norm']:.2e}", refresh=False)

        self.coordinator = LBFGSCoordinator(self.server, self.batch, memory=self.config.memory,
                                            max_iterations=self.config.iterations, gtol=self.gtol,
                                            ftol=self.ftol, on_iteration=on_iteration)
        try:
            self.coordinator.run()
        finally:
            if bar is not None:
                bar.close()
        return self.history

    def current_params(self) -> np.ndarray:
        return self._final["params"] if self._final is not None else self.server.fetch()

    def evaluate(self) -> dict:
        return self.evaluator.final(self.current_params())

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        try:
            if self.server is not None:
                self._final = {"params": self.server.fetch(), "shards": self.server.stats(),
                               "shard_workers": list(self.server.workers), "replicas": self._replica_stats()}
        finally:
            self.server = None
            if self.batch is not None:
                self.batch.data = {}
            if self.cluster is not None:
                self.cluster.close()
            gc.collect()

    def __enter__(self) -> "SandblasterLBFGS":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _replica_stats(self) -> dict[int, dict]:
        """Each live replica's own counters (units, pushes, fetches), asked of its state actor."""
        out = {}
        for slot in self.batch.live() if self.batch else []:
            try:
                out[slot.index] = self.cluster.registry.proxy(f"sandblaster-replica-{slot.index}").stats().result(
                    timeout=5)
            except Exception:  # noqa: BLE001 - a lost replica has no counters to give
                pass
        return out

    def summary(self) -> dict:
        b = self.batch
        n = self.data.n_train
        evaluations = self.coordinator.evaluations if self.coordinator else 0
        slow = dict(self.config.slow_replicas)
        lost = {x["replica"] for x in b.lost} if b else set()
        own = self._final["replicas"] if self._final else self._replica_stats()
        replicas = [{"replica": s.index, "worker": s.worker, "units": b.units_done[s.index],
                     "steps": b.units_done[s.index], "pushes": own.get(s.index, {}).get("pushes", 0),
                     "fetches": own.get(s.index, {}).get("fetches", 0),
                     "examples": sum(u.size for u in b.units) // len(b.units) * b.units_done[s.index],
                     "failures": int(s.index in lost), "slow_factor": slow.get(s.index, 1.0)}
                    for s in (b.slots if b else [])]
        shards = self._final["shards"] if self._final else (self.server.stats() if self.server else [])
        return {
            "algorithm": self.name, "params": self.current_params(),
            "steps": len(self.history) - 1 if self.history else 0, "examples": evaluations * n,
            "train_seconds": sum(b.batch_seconds) if b else 0.0, "history": list(self.history),
            "replicas": replicas, "shards": shards,
            "bytes": {"fetched": sum(s.get("bytes_fetched", 0) for s in shards),
                      "pushed": sum(s.get("bytes_pushed", 0) for s in shards),
                      "between_partitions": 0, "between_partitions_min": 0},
        }

    def report(self) -> dict:
        from ..telemetry import build_report

        s = self.summary()
        b = self.batch
        c = self.coordinator
        extra = {
            "dataset": self.data.summary(),
            "model": {"name": self.network.name, "parameters": self.network.size,
                      "layers": [layer.describe() for layer in self.network.layers]},
            "cluster": {"kind": self.cluster.kind if self.cluster else "none"},
            "sandblaster": {
                "iterations": len(self.history) - 1 if self.history else 0,
                "batch_evaluations": c.evaluations if c else 0, "stop_reason": c.stop_reason if c else "",
                "work_unit_size": self.unit_size, "work_units_per_batch": len(b.units) if b else 0,
                "units_per_replica": {str(k): v for k, v in sorted(b.units_done.items())} if b else {},
                "backups_issued": b.backups_issued if b else 0, "backups_won": b.backups_won if b else 0,
                "batch_seconds_median": float(np.median(b.batch_seconds)) if b and b.batch_seconds else 0.0,
                "lost_replicas": b.lost if b else [],
            },
        }
        return build_report(s, self.config.to_dict(), self.evaluator.final(s["params"]),
                            time.perf_counter() - self._t0, extra)
