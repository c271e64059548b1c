"""Model partitioning (DistBelief Sec. 3): one replica's network split across K machines.

Numpy only. ``ownership`` decides which partition owns which units and
parameters, ``needs`` / ``boundary_floats`` compute what must cross partition
boundaries, ``describe`` tabulates it, ``PartitionedNetwork`` runs the split
network in process as the reference for partitioned execution,
``PartitionWorker`` is one partition exchanging boundary messages with its
partners (in process, or as a Dask actor), and ``aligned_layout`` orders the
parameters so every parameter shard holds one partition's.
"""

from .alignment import AlignedLayout, aligned_layout
from .execute import PartitionedNetwork
from .ownership import Ownership, ownership
from .places import partition_places
from .traffic import boundary_floats, describe, inputs_used, needs
from .worker import PartitionWorker

__all__ = ["AlignedLayout", "Ownership", "PartitionWorker", "PartitionedNetwork", "aligned_layout",
           "boundary_floats", "describe", "inputs_used", "needs", "ownership", "partition_places"]
