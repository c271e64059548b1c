"""The side of its worker that a task (or an actor's method) asks: a simulated machine's, an in-process
worker's, or Dask's."""

from __future__ import annotations

from .inprocess.task_side import current
from .protocol import TaskSide
from .sim.task_side import current as simulated


def task_side() -> TaskSide:
    """The side of the worker this code runs on: a simulated machine's or an in-process worker's if it is
    one, else Dask's."""
    side: TaskSide | None = simulated() or current()
    if side is not None:
        return side
    from .dask.task_side import DaskTaskSide

    return DaskTaskSide()
