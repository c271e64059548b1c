"""An emulated cluster on one machine: hosts as network namespaces with shaped links and CPU shares, running
real Dask schedulers and workers (DESIGN.md, "The emulated cluster")."""

from .cluster import (
                      Cluster,
                      ClusterSpec,
                      ClusterState,
                      ClusterUp,
                      EmulationUnavailable,
                      leftovers,
                      running,
                      tear_down,
                      up_now,
)
from .links import parse_rate
from .support import missing

__all__ = ["Cluster", "ClusterSpec", "ClusterState", "ClusterUp", "EmulationUnavailable", "leftovers", "missing",
           "parse_rate", "running", "tear_down", "up_now"]
