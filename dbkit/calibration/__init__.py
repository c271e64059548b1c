"""Timing this machine: the rigs behind ``dbkit calibrate`` and the measurements lessons 01 and 05 show.

Off the learner's path: nothing else in dbkit imports it, and its names load
when first used. ``time_roundtrip`` (a shard's fetch and push, lesson 01),
``time_partitioned_step`` (a partitioned step, lesson 05) and
``time_control_plane`` (the messages a job's driver sends) measure through a
real ``dbkit.Cluster``; ``calibrate`` fits a simulator profile to what the rigs
time (``dbkit calibrate``).
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"time_roundtrip": ".timing", "time_partitioned_step": ".timing", "RoundTrip": ".timing",
         "PartitionStep": ".timing", "median_ms": ".timing", "time_control_plane": ".control_plane",
         "calibrate": ".calibrate"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'dbkit.calibration' has no attribute {name!r}")
