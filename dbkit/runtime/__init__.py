"""Where a job's parts run: the runtime protocol and its in-process implementation.

``dbkit.runtime.protocol`` says what a driver asks of its machines;
``dbkit.Cluster`` answers it on Dask and ``InProcessCluster`` in this
process (``DownpourSGD(..., cluster=InProcessCluster(workers=2))``).
"""

from .inprocess import InProcessCluster
from .protocol import ClusterFactory, Runtime, TaskSide

__all__ = ["ClusterFactory", "InProcessCluster", "Runtime", "TaskSide"]
