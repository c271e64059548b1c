"""Datasets: built-ins, local files (each malformed case), shards and batches."""

import gzip
import struct

import numpy as np
import pytest

from dbkit import data
from dbkit.data import DataError


def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def _good():
    rng = np.random.default_rng(0)
    return dict(X_train=rng.standard_normal((20, 4)), y_train=rng.integers(0, 3, 20),
                X_test=rng.standard_normal((5, 4)), y_test=rng.integers(0, 3, 5))


def test_digits_is_bundled_and_standardised():
    ds = data.load("digits")
    assert ds.n_features == 64 and ds.n_classes == 10 and ds.image_shape == (8, 8, 1)
    assert ds.n_train + len(ds.y_test) == 1797
    assert np.allclose(ds.X_train.mean(axis=0), 0, atol=1e-5)
    assert ds.X_train.dtype == np.float32


def test_digits_are_scikit_learns_arrays_read_without_importing_it():
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from dbkit.data.sources import digits, split

    ref = load_digits()
    want = split(ref.data.astype(np.float32), ref.target, 0.2, 3)
    got = digits(seed=3)
    for a, b in zip((got.X_train, got.y_train, got.X_test, got.y_test), want):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    code = "import sys; from dbkit.data.sources import digits; digits(); print('sklearn' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_synthetic_is_seeded_and_learnable_shape():
    cfg = data.SyntheticConfig(n_features=10, n_classes=4, n_train=300, n_test=50, seed=5)
    a, b = data.synthetic(cfg), data.synthetic(cfg)
    assert np.array_equal(a.X_train, b.X_train) and np.array_equal(a.y_train, b.y_train)
    assert len(np.unique(a.y_train)) == 4
    c = data.synthetic(data.SyntheticConfig(n_features=10, n_classes=4, n_train=300, n_test=50, seed=6))
    assert not np.array_equal(a.X_train, c.X_train)


def test_speech_dataset_has_the_paper_input_shape():
    ds = data.load("speech")
    assert ds.n_features == 11 * 40 and ds.image_shape == (11, 40, 1)


def test_npz_round_trip(tmp_path):
    arrays = _good()
    ds = data.load(str(_npz(tmp_path / "d.npz", **arrays)), standardized=False)
    assert np.allclose(ds.X_train, arrays["X_train"]) and np.array_equal(ds.y_test, arrays["y_test"])


def test_npz_images_keep_their_shape(tmp_path):
    arrays = _good()
    arrays["X_train"] = np.zeros((20, 3, 3))
    arrays["X_test"] = np.zeros((5, 3, 3))
    ds = data.load_npz(_npz(tmp_path / "img.npz", **arrays))
    assert ds.image_shape == (3, 3, 1) and ds.n_features == 9


@pytest.mark.parametrize("change,message", [
    (lambda a: a.pop("y_test"), "missing keys"),
    (lambda a: a.update(y_train=a["y_train"][:-1]), "rows but y_train has"),
    (lambda a: a["X_train"].__setitem__((0, 0), np.nan), "non-finite"),
    (lambda a: a["X_test"].__setitem__((1, 1), np.inf), "non-finite"),
    (lambda a: a.update(X_test=np.zeros((5, 3))), "features"),
    (lambda a: a.update(y_train=a["y_train"] - 5), "integer class labels"),
    (lambda a: a.update(y_train=a["y_train"] + 0.5), "integer class labels"),
    (lambda a: a.update(X_train=np.zeros((0, 4)), y_train=np.zeros(0)), "empty"),
])
def test_malformed_npz_gives_a_clear_error_naming_the_file(tmp_path, change, message):
    arrays = _good()
    change(arrays)
    path = _npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=message) as e:
        data.load(str(path))
    assert "bad.npz" in str(e.value)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        data.load(str(tmp_path / "absent.npz"))
    with pytest.raises(DataError, match="not a built-in dataset"):
        data.load("no-such-dataset")
    (tmp_path / "junk.npz").write_bytes(b"this is not a zip file")
    with pytest.raises(DataError, match="junk.npz"):
        data.load(str(tmp_path / "junk.npz"))


def _idx(path, array, code=0x08, gz=False):
    header = bytes([0, 0, code, array.ndim]) + struct.pack(">" + "I" * array.ndim, *array.shape)
    body = header + array.astype(">u1" if code == 0x08 else ">f4").tobytes()
    (gzip.open if gz else open)(path, "wb").write(body)


def _mnist_folder(folder, gz=False):
    rng = np.random.default_rng(0)
    ext = ".gz" if gz else ""
    _idx(folder / f"train-images-idx3-ubyte{ext}", rng.integers(0, 255, (12, 4, 4)), gz=gz)
    _idx(folder / f"train-labels-idx1-ubyte{ext}", rng.integers(0, 10, 12), gz=gz)
    _idx(folder / f"t10k-images-idx3-ubyte{ext}", rng.integers(0, 255, (3, 4, 4)), gz=gz)
    _idx(folder / f"t10k-labels-idx1-ubyte{ext}", np.array([0, 1, 9]), gz=gz)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_folder_loads(tmp_path, gz):
    _mnist_folder(tmp_path, gz)
    ds = data.load(str(tmp_path), standardized=False)
    assert ds.image_shape == (4, 4, 1) and ds.n_train == 12 and list(ds.y_test) == [0, 1, 9]
    raw = data.read_idx(tmp_path / ("train-images-idx3-ubyte" + (".gz" if gz else "")))
    assert np.array_equal(ds.X_train.reshape(12, 4, 4), raw)


def test_idx_float_type(tmp_path):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    _idx(tmp_path / "f.idx", arr, code=0x0D)
    assert np.array_equal(data.read_idx(tmp_path / "f.idx"), arr)


def test_malformed_idx(tmp_path):
    _mnist_folder(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="missing IDX file t10k-labels"):
        data.load(str(tmp_path))
    bad = tmp_path / "bad-idx"
    bad.write_bytes(b"\x01\x02\x03\x04rest")
    with pytest.raises(DataError, match="bad magic"):
        data.read_idx(bad)
    short = tmp_path / "short-idx"
    short.write_bytes(bytes([0, 0, 8, 1]) + struct.pack(">I", 10) + b"\x00" * 3)
    with pytest.raises(DataError, match="promises"):
        data.read_idx(short)


def test_shards_are_disjoint_and_cover_everything():
    parts = data.shard_indices(103, 4, seed=1)
    joined = np.concatenate(parts)
    assert len(joined) == 103 and len(np.unique(joined)) == 103
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError, match="n_shards"):
        data.shard_indices(3, 4)


def test_minibatches_cover_each_epoch_once():
    X = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10)
    batches = data.MiniBatches(X, y, batch_size=5, seed=0)
    seen = np.concatenate([next(batches)[1] for _ in range(2)])
    assert sorted(seen) == list(range(10))
    again = data.MiniBatches(X, y, batch_size=5, seed=0)
    assert np.array_equal(next(again)[1], seen[:5])
    with pytest.raises(ValueError, match="batch_size"):
        data.MiniBatches(X, y, batch_size=0)


def test_signals_are_seeded_shaped_and_not_linearly_separable():
    from sklearn.linear_model import LogisticRegression

    a, b = data.signals(seed=3, small=True), data.signals(seed=3, small=True)
    assert np.array_equal(a.X_train, b.X_train) and np.array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.X_train, data.signals(seed=4, small=True).X_train)
    assert a.X_train.shape == (4000, 40) and a.X_test.shape == (1000, 40) and a.n_classes == 10
    assert np.all(np.bincount(a.y_train, minlength=10) > 300)  # every class, roughly balanced
    assert np.isfinite(a.X_train).all()
    ds = data.load("signals")  # standardised, small under DBKIT_SMALL
    linear = LogisticRegression(max_iter=300).fit(ds.X_train, ds.y_train).score(ds.X_test, ds.y_test)
    assert 0.2 < linear < 0.5  # shifted, sheared templates: a linear model cannot sort them (MNIST-1D's point)


@pytest.mark.parametrize("bad, message", [(dict(n_train=0), "n_train"), (dict(length=4), "length"),
                                           (dict(padding=(10, 5)), "padding")])
def test_signals_config_refuses_bad_values(bad, message):
    with pytest.raises(ValueError, match=message):
        data.SignalsConfig(**bad)
