"""Downpour SGD (DistBelief Sec. 4.1): asynchronous model replicas and a sharded parameter server.

The replica and its loop are plain numpy (``DownpourReplica``, ``run_replica_loop``, with their
``Schedule`` of fetches and pushes and their ``Exchange`` that only starts a fetch or a push); the
job (``DownpourSGD``) and its driver (``Fleet`` of replicas, ``Placement`` of shards, ``Recovery``)
are written against the runtime protocol (``dbkit.runtime``) and run on Dask, in process, or
anything else that answers it. ``README.md`` in this folder maps the paper's pseudocode to the code.

Importing this package loads no Dask; the job and its driver load when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from .exchange import Exchange, Schedule, StepActions, check_rates
from .replica import DownpourReplica
from .replica_book import ReplicaBook
from .replica_loop import run_replica_loop

_LAZY = {"DownpourSGD": ".job", "Fleet": ".fleet", "Placement": ".placement", "Recovery": ".recovery"}

__all__ = ["DownpourReplica", "Exchange", "ReplicaBook", "Schedule", "StepActions", "check_rates",
           "run_replica_loop", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.downpour' has no attribute {name!r}")
