"""The synchronous SGD baseline DistBelief is measured against (Sec. 5): one model, one step at a time.

``SGDTrainer`` takes the steps (plain numpy); the job ``SyncSGD`` runs it in memory, or with
``on_cluster=True`` through parameter shards placed by the runtime, bit for bit the same.
"""

from __future__ import annotations

import importlib
from typing import Any

from .trainer import SGDTrainer, TrainingDiverged

_LAZY = {"SyncSGD": ".job"}

__all__ = ["SGDTrainer", "SyncSGD", "TrainingDiverged"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.sync_sgd' has no attribute {name!r}")
