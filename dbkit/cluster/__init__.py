"""The only part of dbkit that knows Dask: clusters, actors and tasks, and the jobs that use them.

Names load when first used, so ``import dbkit.cluster`` is cheap and an
in-memory ``SyncSGD`` never loads Dask.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "Cluster": ".session", "ClusterError": ".session", "SchedulerAddressError": ".session",
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
