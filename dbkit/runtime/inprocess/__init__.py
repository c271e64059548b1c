"""The in-process runtime: workers, actors and tasks in this process (``InProcessCluster``)."""

from .cluster import InProcessCluster, InProcessSession
from .task_side import InProcessTaskSide

__all__ = ["InProcessCluster", "InProcessSession", "InProcessTaskSide"]
