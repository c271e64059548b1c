"""Sandblaster L-BFGS (DistBelief Sec. 4.2): a coordinator, history kept on the shards, work units.

The coordinator (``LBFGSCoordinator``: L-BFGS's two-loop recursion and a Wolfe line search, sent to
the shards as commands, receiving only scalars), the ``UnitDispatcher`` (load balancing, backup
tasks, redo after a loss), the replicas' ``SandblasterReplica`` and the ``WorkUnit`` are plain numpy;
the job (``SandblasterLBFGS``) and its ``UnitBatch`` are written against the runtime protocol
(``dbkit.runtime``). ``README.md`` in this folder maps the paper's pseudocode to the code.

Importing this package loads no Dask; the job and its batch load when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .coordinator import CoordinatorState, Iteration, LBFGSCoordinator
from .dispatcher import UnitDispatcher
from .lbfgs import HistoryPair, two_loop, two_loop_numpy
from .line_search import wolfe_search
from .records import Assignment, Decisions, LostReplica, Slot, UnitRecord, UnitResult
from .replica import SandblasterReplica, SandblasterReplicaFigures
from .work_units import LocalBatch, WorkUnit, default_unit_size, make_units

_LAZY = {"SandblasterLBFGS": ".job", "UnitBatch": ".batch"}

__all__ = ["Assignment", "CoordinatorState", "Decisions", "HistoryPair", "Iteration", "LBFGSCoordinator",
           "LocalBatch", "LostReplica", "SandblasterReplica", "SandblasterReplicaFigures", "Slot", "UnitDispatcher",
           "UnitRecord", "UnitResult", "WorkUnit", "default_unit_size", "make_units", "two_loop", "two_loop_numpy",
           "wolfe_search", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.sandblaster' has no attribute {name!r}")
