"""Sandblaster's checkpoints and a lost shard's return (issue #13; DistBelief Sec. 4.2).

At an iteration boundary every shard writes its parameters, gradient and
L-BFGS history (``dbkit.ps.vector_checkpoint``), then the driver writes
``sandblaster.json``: the coordinator's state and the iteration whose shard
files are whole. When a shard's worker dies, every shard is started again from
that checkpoint on live workers (the survivors too: mid-iteration they hold a
trial point), the coordinator goes back to the checkpoint's iteration, and the
batch and iterations after it are redone. L-BFGS is deterministic given its
batch gradients, so the run ends where an undisturbed one would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ...algorithms.sandblaster import CoordinatorState
from ...config import RunConfig
from ...ps import CheckpointError, ShardedParameters
from ...ps.checkpoint import atomic_write
from ...ps.vector_checkpoint import VectorState, read_vectors, vectors_file
from ..session import Cluster
from ..shards import start_shards

STATE_FILE = "sandblaster.json"


class SandblasterCheckpoints:
    """Writes a Sandblaster run's checkpoints into ``directory`` every ``every`` seconds and reads
    the last whole one back. ``model`` is the network's fingerprint."""

    def __init__(self, directory: str, every: float, model: str) -> None:
        self.directory, self.every, self.model = directory, every, model
        self.saved_at: float | None = None
        self.iteration: int | None = None  # of the last whole checkpoint
        self.generation = 0  # shards started again so far

    def due(self, now: float) -> bool:
        return self.saved_at is None or now - self.saved_at >= self.every

    def save(self, server: ShardedParameters, state: CoordinatorState, now: float, config: dict) -> int:
        """Shards first, then the state file naming their iteration (with the run's ``config``, a
        ``RunConfig.to_dict()``); older shard files go."""
        it = state.iteration
        server.save_vectors(self.directory, state.vectors, self.model, it)
        doc = {"format": 1, "model": self.model, "iteration": it, "ranges": [list(r) for r in server.layout.ranges],
               "coordinator": state.to_dict(), "config": config}
        atomic_write(Path(self.directory) / STATE_FILE, lambda f: f.write(json.dumps(doc).encode()))
        for old in Path(self.directory).glob("sandblaster-shard-*-iteration-*.npz"):
            if not old.name.endswith(f"-iteration-{it}.npz"):
                old.unlink(missing_ok=True)
        self.saved_at, self.iteration = now, it
        return it

    @staticmethod
    def settings(directory: str | os.PathLike[str]) -> dict:
        """The flat settings the checkpointed run had (``RunConfig.make(**...)``)."""
        path = Path(directory) / STATE_FILE
        try:
            saved = json.loads(path.read_text())["config"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: no usable Sandblaster checkpoint ({type(e).__name__}: {e})") from e
        return {**RunConfig.flat_settings(saved), "algorithm": "sandblaster"}

    def load(self, ranges: list[tuple[int, int]]) -> tuple[CoordinatorState, list[VectorState]]:
        """The last whole checkpoint, every file checked before anything is used."""
        path = Path(self.directory) / STATE_FILE
        try:
            doc = json.loads(path.read_text())
            state = CoordinatorState.from_dict(doc["coordinator"])
            it = int(doc["iteration"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: no usable Sandblaster checkpoint ({type(e).__name__}: {e})") from e
        if doc.get("model") != self.model or [tuple(r) for r in doc.get("ranges", [])] != list(ranges):
            raise CheckpointError(f"{path} is a checkpoint of another model or layout")
        shards = [read_vectors(vectors_file(self.directory, i, it), self.model, span, it)
                  for i, span in enumerate(ranges)]
        return state, shards

    def restore(self, cluster: Cluster, server: ShardedParameters, workers: list[str]
                ) -> tuple[ShardedParameters, CoordinatorState, str]:
        """New shards, on ``workers``, holding the last checkpoint's vectors; returns them, the
        coordinator's state to go back to, and the new shards' name prefix."""
        state, saved = self.load(list(server.layout.ranges))
        params = np.concatenate([s.vectors["params"] for s in saved])
        self.generation += 1
        prefix = f"shard-g{self.generation}-"
        new = start_shards(cluster, params, len(saved), "sgd", 1.0, prefix=prefix, workers=workers,
                           layout=server.layout)
        new.load_vectors(saved)
        return new, state, prefix

