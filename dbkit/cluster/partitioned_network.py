"""One replica's network split across workers: K ``PartitionWorker`` actors that
exchange only boundary activations and gradients (DistBelief Sec. 3)."""

from __future__ import annotations

import numpy as np

from ..nn import Network
from ..partition import boundary_floats
from ..partition import inputs_used
from ..partition import plan as make_plan
from ..ps import resolve
from .partition_actor import PartitionWorker
from .session import Cluster


class PartitionedReplica:
    """``loss_and_grad`` like ``Network.loss_and_grad``, computed by ``k`` partition actors.

    Partitions are placed round-robin on ``workers`` (default: all). The
    gradient is assembled here only to check and to train in process;
    partitions in Downpour push their own parts to their own shards.
    """

    def __init__(self, cluster: Cluster, network: Network, k: int, workers: list[str] | None = None,
                 name: str = "partition") -> None:
        self.cluster, self.network, self.k = cluster, network, k
        workers = workers or cluster.workers()
        self.parts = [cluster.place_actor(f"{name}-{j}", PartitionWorker, j, k, network,
                                          worker=workers[j % len(workers)]) for j in range(k)]
        self.workers = [workers[j % len(workers)] for j in range(k)]
        handles = [(str(p.key), w) for p, w in zip(self.parts, self.workers)]
        for r in [p.connect(handles) for p in self.parts]:
            resolve(r)
        self.plan = make_plan(network, k)
        self.indices = [self.plan.param_indices(j) for j in range(k)]
        # each partition gets only the input columns its first layer reads
        self.input_cols = [inputs_used(network.layers[0], self.plan.units(0, j)) for j in range(k)]
        self.step = 0
        self.bytes_between_partitions = 0
        self._sent = [0] * k

    def set_params(self, params: np.ndarray) -> None:
        for r in [p.set_params(params[idx]) for p, idx in zip(self.parts, self.indices)]:
            resolve(r)

    def load_batch(self, X: np.ndarray, y: np.ndarray) -> None:
        """Leave a batch on the partitions (each its own columns) for ``run(None, None)``."""
        X = np.asarray(X, dtype=np.float32)
        for r in [p.load_batch(X[:, cols], y) for p, cols in zip(self.parts, self.input_cols)]:
            resolve(r)

    def run(self, X: np.ndarray | None, y: np.ndarray | None, return_grad: bool = True) -> list[dict]:
        """One forward and backward pass on the parameters already loaded; each partition's result.

        ``X=None`` uses the batch left by ``load_batch``.
        """
        self.step += 1
        if X is None:
            return [resolve(r) for r in [p.run_step(self.step, None, None, return_grad) for p in self.parts]]
        X = np.asarray(X, dtype=np.float32)
        return [resolve(r) for r in [p.run_step(self.step, X[:, cols], y, return_grad)
                                     for p, cols in zip(self.parts, self.input_cols)]]

    def loss_and_grad(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        self.set_params(params)
        results = self.run(X, y)
        grad = np.zeros(self.network.size, dtype=np.float32)
        loss = 0.0
        for j, res in enumerate(results):
            grad[self.indices[j]] = res["grad"]
            loss += (res["loss"] or 0.0) + res["penalty"]
            self.bytes_between_partitions += res["bytes_sent"] - self._sent[j]
            self._sent[j] = res["bytes_sent"]
        return loss, grad

    def minimum_bytes(self, batch: int) -> int:
        """What the connectivity requires for one forward and backward pass of ``batch`` examples."""
        f = boundary_floats(self.plan)
        return 4 * batch * (f["forward"] + f["backward"])
