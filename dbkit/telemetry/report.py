"""The JSON run report whose fields DESIGN.md fixes (other parts rely on them)."""

from __future__ import annotations

import json
import math
import platform
import time
from pathlib import Path

import numpy as np

REQUIRED = {
    "algorithm": None,
    "config": None,
    "wall_seconds": None,
    "examples_per_second": None,
    "final": ("train_loss", "test_loss", "test_accuracy", "full_batch_loss"),
    "history": ("t", "step", "train_loss", "test_accuracy"),
    "replicas": ("steps", "pushes", "fetches", "examples", "failures"),
    "shards": ("worker", "size", "updates", "rejected", "staleness"),
    "bytes": ("fetched", "pushed", "between_partitions", "between_partitions_min"),
}
STALENESS_KEYS = ("mean", "p50", "p95", "max")


def build_report(summary: dict, config: dict, final: dict, wall_seconds: float, extra: dict | None = None) -> dict:
    """Assemble a report from an algorithm's ``summary()`` and a final evaluation.

    ``examples_per_second`` counts training examples over the time spent in
    training steps (evaluation excluded); ``wall_seconds`` is the whole run.
    """
    train_seconds = summary.get("train_seconds") or wall_seconds
    shards = [
        {"worker": s.get("worker", "local"), **{k: v for k, v in s.items() if k != "worker"}}
        for s in summary.get("shards", [])
    ]
    report = {
        "algorithm": summary["algorithm"],
        "config": config,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"python": platform.python_version(), "numpy": np.__version__},
        "wall_seconds": float(wall_seconds),
        "train_seconds": float(train_seconds),
        "steps": int(summary["steps"]),
        "examples": int(summary["examples"]),
        "examples_per_second": float(summary["examples"] / train_seconds) if train_seconds > 0 else 0.0,
        "final": {k: float(v) for k, v in final.items()},
        "history": summary["history"],
        "replicas": summary["replicas"],
        "shards": shards,
        "bytes": {k: int(v) for k, v in summary["bytes"].items()},
    }
    report.update(extra or {})
    return report


def validate_report(report: dict) -> list[str]:
    """Problems with ``report`` against DESIGN.md's contract; empty when it is whole."""
    problems = []
    for key, subkeys in REQUIRED.items():
        if key not in report:
            problems.append(f"missing {key!r}")
            continue
        value = report[key]
        rows = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not value and key != "shards":
            problems.append(f"{key!r} is empty")
        for i, row in enumerate(rows if subkeys else []):
            for sub in subkeys:
                if not isinstance(row, dict) or sub not in row:
                    problems.append(f"{key}[{i}] lacks {sub!r}" if isinstance(value, list) else f"{key} lacks {sub!r}")
            if key == "shards" and isinstance(row.get("staleness"), dict):
                problems += [f"shards[{i}].staleness lacks {s!r}" for s in STALENESS_KEYS if s not in row["staleness"]]
    return problems


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    return obj


def write_report(report: dict, path: str | Path) -> Path:
    """Write ``report`` as JSON (non-finite numbers become null); returns the path.

    Writes to a temporary file first, so an existing report is never left half-written.
    """
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_jsonable(report), indent=2, allow_nan=False))
    tmp.replace(path)
    return path
