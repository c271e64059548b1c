"""Checkpoints of parameter shards: one file per shard, written atomically, read without pickle.

DistBelief's shards come back after a machine failure from what they last
saved (Sec. 4.1 and 4.2). Here each shard writes ``shard-<i>.npz`` into a
checkpoint directory: its parameters, its optimizer state (Adagrad's
accumulators) and a little JSON (its range, version, rule, the model's
fingerprint and a SHA-256 of the arrays). The driver adds ``checkpoint.json``
(the layout and the run's settings), so a whole job can be resumed.

Every file is written to a temporary name and renamed, so a reader finds the
previous checkpoint or the new one, never half of one. Files are read with
``allow_pickle=False`` and checked whole (keys, types, lengths, checksum,
range, model) before anything is returned: a corrupt, truncated or
mismatched checkpoint raises ``CheckpointError`` and nothing is half-loaded.
No Dask import.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .checkpoint_error import CheckpointError  # noqa: F401 - dbkit.ps.checkpoint.CheckpointError, as ever
from .seal import seal_json, seal_npz, unseal_json, unseal_npz
from .update_rule import make_rule

FORMAT = 2  # 2: every file sealed with a SHA-256 over its bytes (dbkit.ps.seal)
MANIFEST = "checkpoint.json"


@dataclass(frozen=True)
class ShardState:
    """What one shard saves: its range, version, rule and arrays (float32), and whose model it is."""

    index: int
    start: int
    stop: int
    version: int
    examples: int
    optimizer: str
    lr: float
    params: np.ndarray
    opt_state: np.ndarray | None
    model: str
    saved_at: float = 0.0
    rule_settings: dict[str, Any] = dataclasses.field(default_factory=dict)  # the rule's knobs (none before #24)

    def as_state(self) -> dict[str, Any]:
        """The dict ``ParameterShard.load_state`` takes."""
        return {"index": self.index, "start": self.start, "stop": self.stop, "version": self.version,
                "params": self.params, "opt_state": self.opt_state, "optimizer": self.optimizer, "lr": self.lr,
                "rule_settings": dict(self.rule_settings)}


def shard_file(directory: str | os.PathLike[str], index: int) -> Path:
    return Path(directory) / f"shard-{int(index)}.npz"


def _digest(params: np.ndarray, opt_state: np.ndarray | None) -> str:
    h = hashlib.sha256(np.ascontiguousarray(params).data)
    if opt_state is not None:
        h.update(np.ascontiguousarray(opt_state).data)
    return h.hexdigest()


def atomic_write(path: Path, write: Any) -> None:
    """``write(file)`` into a temporary file beside ``path``, flushed to disk, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def probe_writable(directory: str | os.PathLike[str]) -> None:
    """Make ``directory`` if need be and write (and drop) a file in it; ``OSError`` if this process cannot."""
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path, prefix=".dbkit-probe-"):
        pass


def writable(directory: str) -> None:
    """``probe_writable`` for a checkpoint folder: ``ValueError`` naming it, before anything starts."""
    try:
        probe_writable(directory)
    except OSError as e:
        raise ValueError(f"checkpoint_dir {directory!r} cannot be written: {e.strerror or e}") from e


def write_shard(directory: str | Path, state: ShardState) -> Path:
    """Write ``state`` to ``shard-<index>.npz`` in ``directory`` atomically; returns the path."""
    meta = {k: v for k, v in dataclasses.asdict(state).items() if k not in ("params", "opt_state")}
    meta.update(format=FORMAT, sha256=_digest(state.params, state.opt_state), size=int(state.params.size))
    arrays: dict[str, Any] = {"params": np.ascontiguousarray(state.params, dtype=np.float32),
              "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    if state.opt_state is not None:
        arrays["opt_state"] = np.ascontiguousarray(state.opt_state, dtype=np.float32)
    path = shard_file(directory, state.index)
    raw = seal_npz(arrays)
    atomic_write(path, lambda f: f.write(raw))
    return path


def read_shard(path: str | Path, model: str | None = None, span: tuple[int, int] | None = None) -> ShardState:
    """The checkpoint in ``path``, checked whole; ``model`` and ``span`` (start, stop), if given, must match.

    Raises ``CheckpointError`` naming the file and what is wrong with it.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no shard checkpoint at {path}")
    try:
        sealed = unseal_npz(path.read_bytes(), str(path))  # every byte checked before anything is parsed
        with np.load(sealed, allow_pickle=False) as z:
            names = set(z.files)
            if not {"params", "meta"} <= names:
                raise CheckpointError(f"{path} is not a dbkit shard checkpoint (it holds {sorted(names)})")
            meta = json.loads(bytes(z["meta"]).decode())
            params = z["params"]
            opt_state = z["opt_state"] if "opt_state" in names else None
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever a damaged archive raises (zipfile: NotImplementedError too)
        why = ("it is not an .npz archive of arrays, or holds Python objects, which are never unpickled"
               if "pickle" in str(e) else f"{type(e).__name__}: {e}")
        raise CheckpointError(f"{path} is corrupt or truncated ({why})") from e
    try:
        state = ShardState(index=int(meta["index"]), start=int(meta["start"]), stop=int(meta["stop"]),
                           version=int(meta["version"]), examples=int(meta["examples"]),
                           optimizer=str(meta["optimizer"]), lr=float(meta["lr"]), params=params,
                           opt_state=opt_state, model=str(meta["model"]), saved_at=float(meta["saved_at"]),
                           rule_settings=dict(meta.get("rule_settings") or {}))
        fmt, digest = int(meta["format"]), str(meta["sha256"])
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: malformed checkpoint metadata ({type(e).__name__}: {e})") from e
    if fmt != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {fmt}, this dbkit reads format {FORMAT}")
    n = state.stop - state.start
    for name, a in (("params", params), ("opt_state", opt_state)):
        if a is not None and (a.dtype != np.float32 or a.shape != (n,)):
            raise CheckpointError(f"{path}: {name} is {a.dtype} {a.shape}, expected float32 ({n},)")
    if _digest(params, opt_state) != digest:
        raise CheckpointError(f"{path} is corrupt: its arrays do not match their checksum")
    try:
        rule = make_rule(state.optimizer, None, **state.rule_settings)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: its update rule cannot be used here ({e}); a rule of your own must be "
                              "registered (imported) before its checkpoint is read") from e
    if (opt_state is None) == rule.keeps_state:
        raise CheckpointError(f"{path}: optimizer {state.optimizer!r} with"
                              f"{'out' if opt_state is None else ''} optimizer state")
    if not (np.isfinite(params).all() and state.version >= 0 and state.examples >= 0):
        raise CheckpointError(f"{path}: parameters not finite, or a negative version or example count")
    refusal = rule.check_state(opt_state) if opt_state is not None else None
    if refusal is not None:
        raise CheckpointError(f"{path}: {refusal}")
    if not (np.isfinite(state.lr) and state.lr > 0):
        raise CheckpointError(f"{path}: learning rate {state.lr!r} is not a positive number")
    if model is not None and state.model != model:
        raise CheckpointError(f"{path} is a checkpoint of another model (fingerprint {state.model}, this run's "
                              f"is {model})")
    if span is not None and (state.start, state.stop) != tuple(span):
        raise CheckpointError(f"{path} covers parameters [{state.start}, {state.stop}), this shard holds "
                              f"[{span[0]}, {span[1]}): another layout")
    return state


@dataclass(frozen=True)
class Manifest:
    """``checkpoint.json``: the model, the layout the shard files follow, and the run's settings."""

    model: str
    parameters: int
    algorithm: str
    partitions: int
    ranges: tuple[tuple[int, int], ...]
    versions: tuple[int, ...]
    config: dict
    saved_at: float

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(format=FORMAT, ranges=[list(r) for r in self.ranges], versions=list(self.versions))
        return d


def write_manifest(directory: str | Path, manifest: Manifest) -> Path:
    path = Path(directory) / MANIFEST
    raw = seal_json(manifest.to_dict())
    atomic_write(path, lambda f: f.write(raw))
    return path


def read_manifest(directory: str | os.PathLike[str]) -> Manifest:
    path = Path(directory) / MANIFEST
    if not path.is_file():
        raise CheckpointError(f"no checkpoint in {directory} (no {MANIFEST}; is it the --checkpoint-dir of a run?)")
    try:
        d = unseal_json(path.read_bytes(), str(path))
        if int(d["format"]) != FORMAT:
            raise CheckpointError(f"{path}: checkpoint format {d['format']}, this dbkit reads format {FORMAT}")
        ranges = tuple((int(a), int(b)) for a, b in d["ranges"])
        m = Manifest(model=str(d["model"]), parameters=int(d["parameters"]), algorithm=str(d["algorithm"]),
                     partitions=int(d["partitions"]), ranges=ranges,
                     versions=tuple(int(v) for v in d["versions"]), config=dict(d["config"]),
                     saved_at=float(d["saved_at"]))
    except CheckpointError:
        raise
    except (OSError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} is corrupt or truncated ({type(e).__name__}: {e})") from e
    contiguous = all(a < b for a, b in ranges) and all(r[1] == q[0] for r, q in zip(ranges, ranges[1:]))
    if not (ranges and ranges[0][0] == 0 and ranges[-1][1] == m.parameters and contiguous):
        raise CheckpointError(f"{path}: shard ranges {ranges} do not cover {m.parameters} parameters")
    if len(m.versions) != len(ranges) or any(v < 0 for v in m.versions):
        raise CheckpointError(f"{path}: versions {list(m.versions)} must be one whole number >= 0 per shard "
                              f"({len(ranges)} shards): corrupt")
    return m


@dataclass(frozen=True)
class Checkpoint:
    """A whole checkpoint directory, read and checked: the manifest and every shard's state."""

    directory: Path
    manifest: Manifest
    shards: tuple[ShardState, ...]

    @property
    def params(self) -> np.ndarray:
        """Every shard's parameters, in the server's order."""
        return np.concatenate([s.params for s in self.shards])

    @property
    def opt_state(self) -> np.ndarray | None:
        if self.shards[0].opt_state is None:
            return None
        return np.concatenate([s.opt_state for s in self.shards if s.opt_state is not None])

    @property
    def optimizer(self) -> str:
        return self.shards[0].optimizer


def read_checkpoint(directory: str | os.PathLike[str], model: str | None = None) -> Checkpoint:
    """Read and check a checkpoint directory whole; ``model`` (a fingerprint), if given, must match."""
    m = read_manifest(directory)
    if model is not None and m.model != model:
        raise CheckpointError(f"the checkpoint in {directory} is of another model (fingerprint {m.model}, "
                              f"{m.parameters} parameters); this run's model has fingerprint {model}")
    shards = tuple(read_shard(shard_file(directory, i), m.model, span) for i, span in enumerate(m.ranges))
    if len({s.optimizer for s in shards}) != 1:
        raise CheckpointError(f"the shards in {directory} were saved with different update rules")
    return Checkpoint(Path(directory), m, shards)
