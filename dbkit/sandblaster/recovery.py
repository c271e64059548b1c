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

import os
import time
from pathlib import Path

import numpy as np

from ..config import RunConfig
from ..ps import CheckpointError, ShardedParameters
from ..ps.checkpoint import atomic_write
from ..ps.seal import seal_json, unseal_json
from ..ps.vector_checkpoint import VectorState, read_vectors, vectors_file
from ..runtime.protocol import Runtime
from ..runtime.shards import start_shards
from ..telemetry import Checkpointed, EventStream, ShardLost
from .batch import UnitBatch
from .coordinator import CoordinatorState, LBFGSCoordinator

STATE_FILE = "sandblaster.json"


class SandblasterCheckpoints:
    """Writes a Sandblaster run's checkpoints into ``directory`` every ``every`` seconds, reads the
    last whole one back, and brings lost shards back from it (``bring_back``). ``model`` is the
    network's fingerprint; ``events``, if given, hears of each checkpoint and each shard lost."""

    def __init__(self, directory: str, every: float, model: str, events: EventStream | None = None) -> None:
        self.directory, self.every, self.model, self.events = directory, every, model, events
        self.saved_at: float | None = None
        self.iteration: int | None = None  # of the last whole checkpoint
        self.generation = 0  # shards started again so far
        self.prefix = "shard"  # the names of the shards in use: ``start_shards``' default, then each generation's

    def due(self, now: float) -> bool:
        return self.saved_at is None or now - self.saved_at >= self.every

    def save(self, server: ShardedParameters, state: CoordinatorState, now: float, config: dict) -> int:
        """Shards first, then the state file naming their iteration (with the run's ``config``, a
        ``RunConfig.to_dict()``); older shard files go."""
        it = state.iteration
        server.save_vectors(self.directory, state.vectors, self.model, it)
        doc = {"format": 1, "model": self.model, "iteration": it, "ranges": [list(r) for r in server.layout.ranges],
               "coordinator": state.to_dict(), "config": config}
        raw = seal_json(doc)
        atomic_write(Path(self.directory) / STATE_FILE, lambda f: f.write(raw))
        for old in Path(self.directory).glob("sandblaster-shard-*-iteration-*.npz"):
            if not old.name.endswith(f"-iteration-{it}.npz"):
                old.unlink(missing_ok=True)
        self.saved_at, self.iteration = now, it
        if self.events is not None:
            self.events.emit(Checkpointed, directory=self.directory, step=it, versions=(it,) * server.layout.n_shards)
        return it

    @staticmethod
    def settings(directory: str | os.PathLike[str]) -> dict:
        """The flat settings the checkpointed run had (``RunConfig.make(**...)``)."""
        path = Path(directory) / STATE_FILE
        try:
            saved = unseal_json(path.read_bytes(), str(path))["config"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{path}: no usable Sandblaster checkpoint ({type(e).__name__}: {e})") from e
        return {**RunConfig.flat_settings(saved), "algorithm": "sandblaster"}

    def load(self, ranges: list[tuple[int, int]]) -> tuple[CoordinatorState, list[VectorState]]:
        """The last whole checkpoint, every file checked before anything is used."""
        path = Path(self.directory) / STATE_FILE
        try:
            doc = unseal_json(path.read_bytes(), str(path))
            state = CoordinatorState.from_dict(doc["coordinator"])
            it = int(doc["iteration"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{path}: no usable Sandblaster checkpoint ({type(e).__name__}: {e})") from e
        if doc.get("model") != self.model or [tuple(r) for r in doc.get("ranges", [])] != list(ranges):
            raise CheckpointError(f"{path} is a checkpoint of another model or layout")
        shards = [read_vectors(vectors_file(self.directory, i, it), self.model, span, it)
                  for i, span in enumerate(ranges)]
        for i, shard in enumerate(shards):
            missing = [name for name in state.vectors if name not in shard.vectors]
            if missing:
                raise CheckpointError(f"{vectors_file(self.directory, i, it)}: lacks the vectors {missing} that the "
                                      f"checkpoint's coordinator needs ({path}); no usable Sandblaster checkpoint")
        return state, shards

    def bring_back(self, cluster: Runtime, server: ShardedParameters, shard_workers: list[str] | None,
                   batch: UnitBatch, coordinator: LBFGSCoordinator) -> ShardedParameters | None:
        """If a shard's worker is gone and a checkpoint was written: new shards from it on live workers
        (the old ones released), the batch under way dropped, the coordinator back at the checkpoint's
        iteration; returns the new shards (``None``: nothing to bring back). The scheduler may take a
        moment to drop a dead worker: up to 10 s is given."""
        if self.iteration is None:
            return None
        t0, deadline = time.monotonic(), time.monotonic() + 10.0
        while True:
            alive = cluster.workers()
            dead = [i for i, w in enumerate(server.workers) if w not in alive]
            if dead or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not dead:
            return None
        done = len(coordinator.rows) - 1
        state, saved = self.load(list(server.layout.ranges))
        self.generation += 1
        old, self.prefix = self.prefix, f"shard-g{self.generation}-"
        new = start_shards(cluster, np.concatenate([s.vectors["params"] for s in saved]), len(saved), "sgd", 1.0,
                           prefix=self.prefix, workers=[w for w in (shard_workers or alive) if w in alive] or alive,
                           layout=server.layout)
        new.load_vectors(saved)
        cluster.registry.release(*[f"{old}{i}" for i in range(server.layout.n_shards)])
        batch.abandon(new)
        coordinator.use(new)
        coordinator.restore(state)
        events = self.events
        if events is None:
            return new
        for i in dead:
            events.emit(ShardLost, shard=i, worker=server.workers[i], step=state.iteration,
                        restored_on=new.workers[i], checkpoint_version=state.iteration, version_read=done,
                        updates_lost=done - state.iteration, seconds=time.monotonic() - t0,
                        reason=f"its worker {server.workers[i]} is gone; iterations after "
                               f"{state.iteration} are redone")
        return new

