"""The ``sandblaster`` block of a report: iterations, work units and backups, batch times (real or simulated)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from ..sandblaster.coordinator import LBFGSCoordinator
from ..sandblaster.dispatcher import UnitDispatcher


def sandblaster_block(coordinator: LBFGSCoordinator | None, dispatcher: UnitDispatcher | None,
                      batch_seconds: Sequence[float], unit_size: int) -> dict:
    """What a Sandblaster report says of its L-BFGS iterations and of the work units of its batches."""
    c, d = coordinator, dispatcher
    return {"sandblaster": {
        "iterations": max(0, len(c.rows) - 1) if c else 0, "batch_evaluations": c.evaluations if c else 0,
        "stop_reason": c.stop_reason if c else "", "work_unit_size": unit_size,
        "work_units_per_batch": len(d.units) if d else 0,
        "units_per_replica": {str(k): v for k, v in sorted(d.units_done.items())} if d else {},
        "backups_issued": d.backups_issued if d else 0, "backups_won": d.backups_won if d else 0,
        "batch_seconds_median": float(np.median(batch_seconds)) if len(batch_seconds) else 0.0,
        "lost_replicas": [dataclasses.asdict(x) for x in d.lost] if d else [],
        "rows": [dataclasses.asdict(r) for r in (c.rows if c else [])]}}
