"""Model partitioning (DistBelief Sec. 3): one replica's network split across K machines.

Numpy only. ``ownership`` decides which partition owns which units and
parameters, ``needs`` / ``boundary_floats`` compute what must cross partition
boundaries, ``describe`` tabulates it, ``PartitionedNetwork`` runs the split
network in process as the reference for partitioned execution,
``PartitionWorker`` is one partition exchanging boundary messages with its
partners (in process, or as a Dask actor), and ``aligned_layout`` orders the
parameters so every parameter shard holds one partition's.

Inside Downpour, a replica split in K (``PartitionedDownpourReplica``) drives K ``DownpourPartition``
objects, each fetching and pushing its own parameters; on a cluster each is a ``PartitionActor``
(``actors.py``), and ``ActorPartitionedNetwork`` computes a whole network's loss and gradient with
K actors (the check against the unpartitioned network). ``README.md`` in this folder maps the paper's
Sec. 3 to the code. Importing this package loads no Dask.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..runtime.places import partition_places
from .alignment import AlignedLayout, aligned_layout
from .downpour_partition import DownpourPartition, PartitionStep
from .execute import PartitionedNetwork
from .ownership import Ownership, ownership
from .replica import PartitionedDownpourReplica
from .traffic import boundary_floats, describe, inputs_used, needs
from .worker import PartitionWorker

_LAZY = {"PartitionActor": ".actors", "ActorPartitionedNetwork": ".actor_network"}

__all__ = ["AlignedLayout", "Ownership", "PartitionWorker", "PartitionedNetwork", "aligned_layout",
           "boundary_floats", "describe", "inputs_used", "needs", "ownership", "partition_places",
           "DownpourPartition", "PartitionStep", "PartitionedDownpourReplica", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.partition' has no attribute {name!r}")
