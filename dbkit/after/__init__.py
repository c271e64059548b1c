"""After DistBelief: the asynchronous-training ideas that followed it, each one file on dbkit's extension points.

Each registers an update rule for the shards (``dbkit.ps.update_rule``) or a
replica loop (``dbkit.downpour.replica_kinds``), so that it is chosen by name
like the paper's own (``optimizer="staleness-aware"``, ``replica="diloco"``)
and runs on the same shards, drivers and simulator. ``docs/extending.md``
shows how to write one more.

- ``staleness_aware``: the step divided by the push's staleness (Zhang et al. 2016).
- ``diloco``: H inner AdamW steps per replica, the parameter delta pushed as an
  outer gradient, Nesterov momentum on the shards (Douillard et al. 2023).
- ``ssp``: a replica more than s steps ahead of the slowest waits (Ho et al. 2013).
- ``backup_sync``: synchronous SGD whose rounds take the first N - b gradients (Chen et al. 2016).
- ``easgd``: replicas keep their own parameters, tied to a centre on the shards by
  an elastic force every tau steps (Zhang et al. 2015).
"""

from . import backup_sync, diloco, easgd, replica_clocks, ssp, staleness_aware

__all__ = ["backup_sync", "diloco", "easgd", "replica_clocks", "ssp", "staleness_aware"]
