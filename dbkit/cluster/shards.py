"""Parameter shards as Dask actors, one per worker where possible (DistBelief Sec. 4.1)."""

from __future__ import annotations

import numpy as np

from ..ps import ParameterShard, ShardedParameters, balanced_layout
from .session import Cluster


def start_shards(cluster: Cluster, initial: np.ndarray, n_shards: int, optimizer: str = "sgd",
                 lr: float = 0.1, prefix: str = "shard") -> ShardedParameters:
    """Place ``n_shards`` ``ParameterShard`` actors over ``initial``, round-robin over workers.

    Returns a ``ShardedParameters`` whose fetch and push go to the actors.
    """
    layout = balanced_layout(len(initial), n_shards)
    specs = [(i, a, b, np.asarray(initial[a:b], dtype=np.float32), optimizer, lr)
             for i, (a, b) in enumerate(layout.ranges)]
    proxies = cluster.place_round_robin(prefix, specs, ParameterShard)
    workers = [cluster.registry.worker(f"{prefix}{i}") for i in range(n_shards)]
    return ShardedParameters(proxies, layout, workers=workers)
