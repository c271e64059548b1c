"""Checkpoints of a shard's named vectors: Sandblaster's parameters, gradient and L-BFGS history.

Sandblaster keeps L-BFGS's (s, y) history on the parameter shards (DistBelief
Sec. 4.2), so a shard's checkpoint is every vector it holds that outlives an
iteration: ``params``, ``grad`` and the history pairs. All shards save at the
same iteration boundary; each file is named with that iteration, so a
checkpoint half written when a machine died never mixes with the last whole
one (the coordinator's state file names the iteration whose files are whole).
Written atomically, read with ``allow_pickle=False`` and checked whole, as
``dbkit.ps.checkpoint`` does for Downpour's shards.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint import CheckpointError, atomic_write
from .seal import seal_npz, unseal_npz


@dataclass(frozen=True)
class VectorState:
    """One shard's named vectors at an iteration boundary."""

    index: int
    start: int
    stop: int
    iteration: int
    model: str
    vectors: dict[str, np.ndarray]


def vectors_file(directory: str | os.PathLike[str], index: int, iteration: int) -> Path:
    return Path(directory) / f"sandblaster-shard-{int(index)}-iteration-{int(iteration)}.npz"


def _digest(vectors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(vectors):
        h.update(name.encode())
        h.update(np.ascontiguousarray(vectors[name]).data)
    return h.hexdigest()


def write_vectors(directory: str | os.PathLike[str], state: VectorState) -> Path:
    """Write ``state`` atomically to its iteration's file in ``directory``; returns the path."""
    meta = {"index": state.index, "start": state.start, "stop": state.stop, "iteration": state.iteration,
            "model": state.model, "names": sorted(state.vectors), "sha256": _digest(state.vectors)}
    arrays: dict[str, Any] = {f"v_{k}": np.ascontiguousarray(v, dtype=np.float32) for k, v in state.vectors.items()}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    path = vectors_file(directory, state.index, state.iteration)
    raw = seal_npz(arrays)
    atomic_write(path, lambda f: f.write(raw))
    return path


def read_vectors(path: str | os.PathLike[str], model: str, span: tuple[int, int], iteration: int) -> VectorState:
    """The vectors in ``path``, checked whole against ``model``, ``span`` and ``iteration``
    (``CheckpointError`` naming the file otherwise)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no Sandblaster shard checkpoint at {path}")
    try:
        with np.load(unseal_npz(path.read_bytes(), str(path)), allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            vectors = {name: z[f"v_{name}"] for name in meta["names"]}
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a damaged archive raises
        raise CheckpointError(f"{path} is corrupt or truncated ({type(e).__name__})") from e
    n = span[1] - span[0]
    if (meta.get("start"), meta.get("stop")) != tuple(span) or meta.get("iteration") != iteration:
        raise CheckpointError(f"{path} holds [{meta.get('start')}, {meta.get('stop')}) at iteration "
                              f"{meta.get('iteration')}, expected [{span[0]}, {span[1]}) at iteration {iteration}")
    if meta.get("model") != model:
        raise CheckpointError(f"{path} is a checkpoint of another model")
    if any(v.dtype != np.float32 or v.shape != (n,) or not np.isfinite(v).all() for v in vectors.values()):
        raise CheckpointError(f"{path}: a vector is not float32 of length {n}, or not finite")
    if _digest(vectors) != meta.get("sha256"):
        raise CheckpointError(f"{path} is corrupt: its vectors do not match their checksum")
    return VectorState(int(meta["index"]), span[0], span[1], iteration, model, vectors)
