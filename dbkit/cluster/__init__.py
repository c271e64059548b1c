"""The only part of dbkit that knows Dask: clusters, actors, placement."""

from .downpour import ChangeInProgress, DownpourSGD
from .registry import ActorRegistry
from .sandblaster import SandblasterLBFGS
from .session import Cluster, ClusterError
from .shards import start_shards

__all__ = ["ChangeInProgress", "DownpourSGD", "SandblasterLBFGS", "ActorRegistry", "Cluster", "ClusterError", "start_shards"]
