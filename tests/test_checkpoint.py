"""Shard checkpoints (issue #13): a round trip is bit for bit, and every damaged or mismatched file is
refused with its own message, before anything is loaded."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from dbkit.nn import build
from dbkit.ps import (
    CheckpointError,
    Manifest,
    ParameterShard,
    read_checkpoint,
    read_shard,
    shard_file,
    write_manifest,
)
from dbkit.ps.checkpoint import ShardState, atomic_write, write_shard
from dbkit.ps.seal import seal_json, seal_npz, unseal_json
from dbkit.ps.vector_checkpoint import VectorState, read_vectors, write_vectors

MODEL = "0123456789abcdef"


def _trained_shard(optimizer: str = "adagrad", index: int = 0, start: int = 0, stop: int = 300) -> ParameterShard:
    rng = np.random.default_rng(index)
    shard = ParameterShard(index, start, stop, rng.normal(size=stop - start).astype(np.float32), optimizer, 0.1)
    for v in range(5):
        shard.push(rng.normal(size=stop - start).astype(np.float32), v, examples=32)
    return shard


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_a_restored_shard_goes_on_exactly_as_the_one_it_was_saved_from(tmp_path, optimizer):
    """The reference is the shard that was never saved: the same pushes after the checkpoint give the
    same parameters, bit for bit, in the shard loaded from it."""
    original = _trained_shard(optimizer)
    assert original.save(str(tmp_path), MODEL) == 5
    state = read_shard(shard_file(tmp_path, 0), MODEL, (0, 300))
    assert state.version == 5 and state.examples == 160 and state.optimizer == optimizer
    restored = ParameterShard(0, 0, 300, np.zeros(300, np.float32), optimizer, 0.1)
    restored.load_state(state.as_state())
    rng = np.random.default_rng(9)
    for _ in range(4):
        g = rng.normal(size=300).astype(np.float32)
        a, b = original.push(g, original.version), restored.push(g, restored.version)
        assert a.accepted and b.accepted and a.version == b.version
    assert np.array_equal(original.fetch()[1], restored.fetch()[1])
    if optimizer == "adagrad":
        assert np.array_equal(original.opt_state, restored.opt_state)


def _checkpoint_dir(tmp_path):
    ranges = ((0, 300), (300, 500))
    shards = [_trained_shard("adagrad", i, a, b) for i, (a, b) in enumerate(ranges)]
    versions = tuple(s.save(str(tmp_path), MODEL) for s in shards)
    write_manifest(tmp_path, Manifest(MODEL, 500, "downpour", 1, ranges, versions, {"model": "mlp"}, 0.0))
    return shards


def test_a_checkpoint_directory_reads_back_whole(tmp_path):
    shards = _checkpoint_dir(tmp_path)
    ckpt = read_checkpoint(tmp_path, MODEL)
    assert np.array_equal(ckpt.params, np.concatenate([s.params for s in shards]))
    assert np.array_equal(ckpt.opt_state, np.concatenate([s.opt_state for s in shards]))
    assert ckpt.manifest.versions == (5, 5) and ckpt.optimizer == "adagrad"


def _flip_a_byte_in_the_parameters(path):
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("params.npy")
    raw = bytearray(path.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200  # inside the array's bytes
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage, message", [
    ("flip", "is corrupt: its bytes do not match their checksum"),
    ("truncate", "carries no checksum: corrupt"),  # its last 64 bytes are not a digest any more
    ("text", "carries no checksum"),
    ("unsealed", "carries no checksum"),  # an archive of the right arrays, but not sealed
    ("pickled", "holds Python objects, which are never unpickled"),
    ("missing", "no shard checkpoint"),
    ("model", "another model"),
])
def test_a_damaged_or_foreign_shard_file_is_refused_with_its_reason(tmp_path, damage, message):
    _checkpoint_dir(tmp_path)
    path = shard_file(tmp_path, 1)
    if damage == "flip":
        _flip_a_byte_in_the_parameters(path)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "text":
        path.write_text("X_train,y_train\n1,2\n")
    elif damage == "unsealed":
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        np.savez(path, **arrays)
    elif damage == "pickled":  # an object array, sealed: loading it would unpickle; it must never be loaded
        path.write_bytes(seal_npz({"params": np.array([object()], dtype=object),
                                   "meta": np.frombuffer(b"{}", np.uint8)}))
    elif damage == "missing":
        path.unlink()
    model = "fedcba9876543210" if damage == "model" else MODEL
    with pytest.raises(CheckpointError, match=message) as err:
        read_checkpoint(tmp_path, model)
    assert "allow_pickle" not in str(err.value)


def test_a_manifest_of_another_layout_or_a_broken_one_is_refused(tmp_path):
    _checkpoint_dir(tmp_path)
    manifest = tmp_path / "checkpoint.json"
    d = json.loads(manifest.read_text())
    d.pop("sha256")
    d["ranges"] = [[0, 250], [250, 500]]  # the files cover (0, 300) and (300, 500)
    manifest.write_bytes(seal_json(d))  # sealed: a whole manifest, of another layout
    with pytest.raises(CheckpointError, match="another layout"):
        read_checkpoint(tmp_path)
    d["ranges"] = [[0, 300], [200, 500]]
    manifest.write_bytes(seal_json(d))
    with pytest.raises(CheckpointError, match="do not cover"):
        read_checkpoint(tmp_path)
    manifest.write_text(json.dumps({**d, "ranges": [[0, 300], [300, 500]]}))  # a hand edit, unsealed
    with pytest.raises(CheckpointError, match="carries no checksum"):
        read_checkpoint(tmp_path)
    manifest.write_text(manifest.read_text()[:40])
    with pytest.raises(CheckpointError, match="carries no checksum"):
        read_checkpoint(tmp_path)
    manifest.unlink()
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        read_checkpoint(tmp_path)


def test_a_write_that_fails_half_way_leaves_the_previous_checkpoint_and_no_debris(tmp_path):
    _trained_shard().save(str(tmp_path), MODEL)
    before = shard_file(tmp_path, 0).read_bytes()

    def half(f):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(shard_file(tmp_path, 0), half)
    assert shard_file(tmp_path, 0).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-0.npz"]


def test_the_fingerprint_tells_architectures_apart_and_ignores_the_penalty():
    a = build("mlp", 64, 10, hidden=(32,), l2=1e-4)
    assert a.fingerprint() == build("mlp", 64, 10, hidden=(32,), l2=0.0).fingerprint()
    assert a.fingerprint() != build("mlp", 64, 10, hidden=(33,)).fingerprint()
    assert a.fingerprint() != build("mlp", 64, 10, hidden=(16, 16)).fingerprint()


def _flips(raw: bytes):
    """Every byte of ``raw`` with one bit flipped (bit ``i % 8`` at byte ``i``, so every bit position is tried)."""
    for i in range(len(raw)):
        damaged = bytearray(raw)
        damaged[i] ^= 1 << (i % 8)
        yield i, bytes(damaged)


def test_a_bit_flipped_anywhere_in_any_checkpoint_file_is_refused_as_a_checkpoint_error(tmp_path):
    """Issue #21, 9: a flip in a zip header's method or flag escaped as NotImplementedError or RuntimeError,
    and a flip in checkpoint.json could change a resumed run's settings (lr 0.05 -> 1.05). The probe's walk:
    every byte of every file, each refused with ``CheckpointError`` and nothing else."""
    _checkpoint_dir(tmp_path)
    read_checkpoint(tmp_path, MODEL)  # whole, it reads
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == ["checkpoint.json", "shard-0.npz", "shard-1.npz"]
    tried = 0
    for path in files:
        whole = path.read_bytes()
        for _, damaged in _flips(whole):
            path.write_bytes(damaged)
            with pytest.raises(CheckpointError):
                read_checkpoint(tmp_path, MODEL)
            tried += 1
        path.write_bytes(whole)
    assert tried == sum(f.stat().st_size for f in files) > 3000


def test_a_bit_flipped_in_a_sandblaster_checkpoint_file_is_refused(tmp_path):
    """The same walk over a Sandblaster shard's vectors and over a sealed state document."""
    rng = np.random.default_rng(0)
    state = VectorState(0, 0, 40, 3, MODEL, {"params": rng.normal(size=40).astype(np.float32),
                                             "s0": rng.normal(size=40).astype(np.float32)})
    path = write_vectors(tmp_path, state)
    whole = path.read_bytes()
    assert read_vectors(path, MODEL, (0, 40), 3).vectors.keys() == state.vectors.keys()
    for _, damaged in _flips(whole):
        path.write_bytes(damaged)
        with pytest.raises(CheckpointError):
            read_vectors(path, MODEL, (0, 40), 3)
    doc = {"iteration": 3, "coordinator": {"history": [[0.5, 1e-5]]}, "config": {"lr": 0.05}}
    raw = seal_json(doc)
    assert unseal_json(raw, "state") == doc
    for _, damaged in _flips(raw):
        with pytest.raises(CheckpointError):
            unseal_json(damaged, "state")


def test_a_sealed_shard_whose_adagrad_state_is_negative_or_whose_lr_is_not_positive_is_refused(tmp_path):
    """Issue #21, 9: a shard file with a valid checksum but negative accumulators resumed to NaN (the square
    root of a negative sum of squares)."""
    good = read_shard(shard_file(tmp_path, 0), MODEL) if _trained_shard().save(str(tmp_path), MODEL) else None
    assert good is not None
    bad_state = good.opt_state.copy()
    bad_state[7] = -1.0
    for changed, says in ((dict(opt_state=bad_state), "accumulators must be finite and non-negative"),
                          (dict(lr=-0.1), "learning rate -0.1 is not a positive number")):
        write_shard(tmp_path, ShardState(**{**good.__dict__, **changed}))
        with pytest.raises(CheckpointError, match=says):
            read_shard(shard_file(tmp_path, 0), MODEL)


class _Placement:
    """What ``Recovery.save`` asks of a Downpour job's placement, over real in-process shards: each shard
    writes its checkpoint; shards in ``dying`` write theirs and then fail to answer, as a shard whose worker
    is killed between its write and its reply."""

    def __init__(self, shards: list[ParameterShard]) -> None:
        from dbkit.ps import ShardedParameters, balanced_layout

        self.server = ShardedParameters(shards, balanced_layout(sum(s.size for s in shards), len(shards)))
        self.partitions = 1
        self.dying: set[int] = set()

    def save(self, directory: str, model: str) -> tuple[dict[int, int], dict[int, str]]:
        versions = {i: s.save(directory, model) for i, s in enumerate(self.server.shards)}
        return ({i: v for i, v in versions.items() if i not in self.dying},
                {i: "CommClosedError: the worker is gone" for i in self.dying})


def test_a_save_interrupted_after_a_shard_wrote_its_file_leaves_that_file_and_the_manifest_as_it_was(tmp_path):
    """``Recovery.save``: a shard that wrote its checkpoint and died before answering makes the save an
    error (no ``Checkpointed``, the manifest unchanged), and its newer file is what a restore reads. The
    reference is the shard itself: the version it had when it wrote."""
    from dbkit.config import RunConfig
    from dbkit.downpour.recovery import JobLink, Recovery
    from dbkit.telemetry import Checkpointed, ErrorEvent, EventStream

    shards = [_trained_shard(index=0, start=0, stop=300), _trained_shard(index=1, start=300, stop=600)]
    placement, events = _Placement(shards), EventStream()
    recovery = Recovery(str(tmp_path), 1.0, MODEL, JobLink(events, lambda where, e: None, lambda: None, lambda: 0))
    config = RunConfig.make(algorithm="downpour", shards=2)
    assert recovery.save(placement, config) == (5, 5)
    for v in range(5, 8):
        shards[1].push(np.ones(300, dtype=np.float32), v, examples=1)
    placement.dying = {1}
    assert recovery.save(placement, config) is None
    (checkpointed,) = events.of(Checkpointed)
    assert checkpointed.versions == (5, 5) and read_checkpoint(tmp_path, MODEL).manifest.versions == (5, 5)
    (error,) = events.of(ErrorEvent)
    assert error.where == "checkpoint of shard 1" and "gone" in error.message
    restored = recovery.load(1, (300, 600))
    assert restored.version == shards[1].version == 8 and np.array_equal(restored.params, shards[1].params)
