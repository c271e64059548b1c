"""The side of its worker that a task (or an actor's method) asks: an in-process worker's, or Dask's."""

from __future__ import annotations

from .inprocess.task_side import current
from .protocol import TaskSide


def task_side() -> TaskSide:
    """The side of the worker this code runs on: an in-process worker's if it is one, else Dask's."""
    side = current()
    if side is not None:
        return side
    from .dask.task_side import DaskTaskSide

    return DaskTaskSide()
