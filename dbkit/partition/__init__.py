"""Model partitioning (DistBelief Sec. 3): one replica's network split across K machines.

Numpy only. ``plan`` decides which partition owns which units and parameters,
``needs`` / ``boundary_floats`` compute what must cross partition boundaries,
``describe`` tabulates it, and ``PartitionedNetwork`` runs the split network in
process as the reference for partitioned execution, and ``aligned_layout``
orders the parameters so every parameter shard holds one partition's.
"""

from .alignment import AlignedLayout, aligned_layout
from .execute import PartitionedNetwork
from .plan import Plan, plan
from .traffic import boundary_floats, describe, inputs_used, needs

__all__ = ["AlignedLayout", "PartitionedNetwork", "aligned_layout", "Plan", "boundary_floats", "describe", "inputs_used", "needs", "plan"]
