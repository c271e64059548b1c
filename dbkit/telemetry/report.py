"""The JSON run report whose fields DESIGN.md fixes (other parts rely on them)."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..ps import ShardFigures
from ..training.evaluate import Evaluation
from ..training.figures import ReplicaFigures
from .accuracy import times_to_accuracy
from .events import ByteCounts

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


@dataclass(frozen=True)
class RunRecord:
    """Everything a job knows about its run, in the form the report is built from.

    ``extra`` holds the algorithm's own blocks (Downpour's ``layout``,
    Sandblaster's ``sandblaster``); ``steps`` defaults to the replicas' steps;
    ``ended`` says how the run ended (its state, or ``"scheduler lost"``), ``None`` while it trains.
    """

    algorithm: str
    state: str
    config: dict
    wall_seconds: float
    train_seconds: float
    final: Evaluation
    history: list[dict]
    replicas: tuple[ReplicaFigures, ...]
    shards: tuple[ShardFigures, ...]
    bytes: ByteCounts
    model: dict
    dataset: dict
    cluster: dict
    events: list[dict]
    extra: dict = field(default_factory=dict)
    steps: int | None = None
    ended: str | None = None


def build_report(record: RunRecord) -> dict:
    """The JSON report of DESIGN.md from a job's ``RunRecord``.

    ``time_to_accuracy`` lists when the run first reached each accuracy of
    ``accuracy.LADDER`` and the configured ``target_accuracy`` (``seconds``
    null: never). ``examples_per_second`` counts training examples over the time spent
    training (paused time and evaluation at the end excluded); ``wall_seconds``
    is the whole run.
    """
    examples = sum(r.examples for r in record.replicas)
    train = record.train_seconds or record.wall_seconds
    report = {
        "algorithm": record.algorithm,
        "state": record.state,
        "ended": record.ended,
        "config": record.config,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"python": platform.python_version(), "numpy": np.__version__},
        "wall_seconds": float(record.wall_seconds),
        "train_seconds": float(train),
        "steps": int(record.steps if record.steps is not None else sum(r.steps for r in record.replicas)),
        "examples": int(examples),
        "examples_per_second": float(examples / train) if train > 0 else 0.0,
        "final": {k: float(v) for k, v in record.final.to_dict().items()},
        "history": record.history,
        "time_to_accuracy": [t.to_dict() for t in times_to_accuracy(record.history,
                                                                     record.config.get("target_accuracy"))],
        "replicas": [r.to_dict() for r in record.replicas],
        "shards": [s.to_dict() for s in record.shards],
        "bytes": {k: int(v) for k, v in dataclasses.asdict(record.bytes).items()},
        "model": record.model,
        "dataset": record.dataset,
        "cluster": record.cluster,
        "events": record.events,
    }
    report.update(record.extra)
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
            for sub in subkeys or ():
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
