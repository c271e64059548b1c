"""The jobs and their drivers: fleets of replicas, placements of shards, recovery, Sandblaster's batch, and
the entry points of the actors and tasks they place, all through the runtime protocol
(``dbkit.runtime``). Dask itself is ``dbkit.runtime.dask``; ``Cluster`` is kept here by name.

Names load when first used, so ``import dbkit.cluster`` is cheap and an
in-memory ``SyncSGD`` never loads Dask.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Cluster": "dbkit.runtime.dask.cluster", "ClusterError": "dbkit.runtime.dask.scheduler",
    "SchedulerAddressError": "dbkit.runtime.dask.scheduler",
    "ActorRegistry": "dbkit.runtime.registry", "start_shards": ".shards",
    "SyncSGD": ".sgd", "DownpourSGD": ".downpour", "SandblasterLBFGS": ".sandblaster",
    "ActorPartitionedNetwork": ".partitioned_network", "PartitionStep": ".timing", "RoundTrip": ".timing",
    "time_partitioned_step": ".timing", "time_roundtrip": ".timing",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.cluster' has no attribute {name!r}")
