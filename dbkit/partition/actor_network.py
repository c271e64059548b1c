"""One network split across workers: K partition actors that exchange only boundary
activations and gradients (DistBelief Sec. 3); ``loss_and_grad`` as the whole network's.

The check that partitioned execution on real actors equals the unpartitioned
network, and what the partitioning benchmark times. Inside Downpour, the
partitions fetch and push their own parameters instead (``DownpourSGD(partitions=K)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..nn import Network
from ..ps import resolve
from .actors import PartitionActor, wireable
from .ownership import ownership
from .traffic import boundary_floats, inputs_used

if TYPE_CHECKING:  # the Dask runtime's cluster; this module itself imports no Dask
    from ..runtime.dask.cluster import Cluster


class ActorPartitionedNetwork:
    """``loss_and_grad`` like ``Network.loss_and_grad``, computed by ``k`` partition actors named ``name-j``.

    Partitions are placed round-robin on ``workers`` (default: all). The
    gradient is assembled here only to check and to train in process;
    partitions in Downpour push their own parts to their own shards.
    """

    def __init__(self, cluster: Cluster, network: Network, k: int, workers: list[str] | None = None,
                 name: str = "partition", transport: str = "socket") -> None:
        self.cluster, self.network, self.k, self.name = cluster, network, k, name
        self.ownership = ownership(network, k)
        workers = workers or cluster.workers()
        self.workers = [workers[j % len(workers)] for j in range(k)]
        self.parts = [cluster.place_actor(f"{name}-{j}", PartitionActor, j, self.ownership, worker=w)
                      for j, w in enumerate(self.workers)]
        handles = [(str(p.key), w) for p, w in zip(self.parts, self.workers)]
        wires = [resolve(p.open_wire()) for p in self.parts] if transport == "socket" else None
        self.wired = wires is not None and wireable(wires)
        for r in [p.connect_to(handles, wires if self.wired else None) for p in self.parts]:
            resolve(r)
        self.indices = [self.ownership.param_indices(j) for j in range(k)]
        # each partition gets only the input columns its first layer reads
        self.input_cols = [inputs_used(network.layers[0], self.ownership.units(0, j)) for j in range(k)]
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
        if self.wired:  # one call, to partition 0, which starts the others
            if X is not None:
                self.load_batch(X, y)  # type: ignore[arg-type]
            answers = resolve(self.parts[0].lead_run(self.step, return_grad))
            return [{**meta, "grad": grad} for meta, grad in answers]
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
        f = boundary_floats(self.ownership)
        return 4 * batch * (f["forward"] + f["backward"])

    def release(self) -> None:
        """Close the partitions' wires and drop the partition actors."""
        for r in [p.close() for p in self.parts]:
            try:
                resolve(r)
            except Exception:  # noqa: BLE001 - its worker is gone, and its wire with it
                pass
        self.cluster.registry.release(*[f"{self.name}-{j}" for j in range(self.k)])
