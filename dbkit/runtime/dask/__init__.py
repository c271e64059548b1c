"""The Dask runtime: the only code in dbkit that imports Dask (``Cluster``, its wires and a task's side).
What is measured through it (``time_roundtrip``, ``time_partitioned_step``, the simulator's calibration) is
``dbkit.calibration``'s.

Names load when first used, so importing this package loads no Dask.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"Cluster": ".cluster", "ClusterError": ".scheduler", "SchedulerAddressError": ".scheduler",
         "probe_scheduler": ".scheduler", "DaskTaskSide": ".task_side"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.runtime.dask' has no attribute {name!r}")
