"""Built-in datasets: ``digits`` (bundled with scikit-learn), ``synthetic``
and ``speech`` (synthetic, paper-shaped: 11 frames x 40 log-energies)."""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .dataset import DataError, Dataset


def split(X: np.ndarray, y: np.ndarray, test_fraction: float, seed: int):
    """Seeded shuffle-and-split into train and test parts."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = max(1, int(round(test_fraction * len(y))))
    te, tr = order[:n_test], order[n_test:]
    return X[tr], y[tr], X[te], y[te]


def digits(seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes).

    Read from scikit-learn's own file, as ``sklearn.datasets.load_digits`` reads it (the same arrays, a test
    checks), without importing scikit-learn: that import takes over a second, longer than many a run."""
    raw = _digits_table()
    X, y = raw[:, :-1].astype(np.float32), raw[:, -1].astype(np.int64)
    X_train, y_train, X_test, y_test = split(X, y, test_fraction, seed)
    return Dataset(X_train, y_train, X_test, y_test, name="digits", image_shape=(8, 8, 1), n_classes=10)


def _digits_table() -> np.ndarray:
    """scikit-learn's ``digits.csv.gz``: 64 pixel columns and the label, a row per image."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("the digits dataset is scikit-learn's: pip install scikit-learn")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",")


@dataclass(frozen=True)
class SyntheticConfig:
    """Settings of a seeded synthetic classification problem.

    Labels come from a fixed random teacher network (one tanh hidden layer)
    with Gumbel noise, so the problem is learnable but not linearly trivial.
    """

    n_features: int = 64
    n_classes: int = 10
    n_train: int = 10_000
    n_test: int = 2_000
    noise: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("n_features", "n_train", "n_test"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {self.n_classes}")
        if not self.noise >= 0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")


def synthetic(config: SyntheticConfig = SyntheticConfig(), name: str = "synthetic") -> Dataset:
    """Make the seeded synthetic dataset described by ``config``."""
    c = config
    rng = np.random.default_rng(c.seed)
    n = c.n_train + c.n_test
    X = rng.standard_normal((n, c.n_features)).astype(np.float32)
    width = max(16, c.n_classes)
    W1 = rng.standard_normal((c.n_features, width)) / np.sqrt(c.n_features)
    W2 = rng.standard_normal((width, c.n_classes)) * 3.0 / np.sqrt(width)
    logits = np.tanh(X @ W1 * 2.0) @ W2
    y = (logits + c.noise * rng.gumbel(size=logits.shape)).argmax(axis=1)
    return Dataset(X[: c.n_train], y[: c.n_train], X[c.n_train :], y[c.n_train :], name=name, n_classes=c.n_classes)


def speech(seed: int = 0, small: bool = False) -> Dataset:
    """Synthetic frames shaped like the paper's speech input: 11 x 40 = 440 features.

    The paper's model had 8,192 output classes; this one has 64 so it fits one
    machine. Labels come from the synthetic teacher network.
    """
    n_train, n_test = (3_000, 600) if small else (20_000, 4_000)
    cfg = SyntheticConfig(n_features=440, n_classes=64, n_train=n_train, n_test=n_test, noise=0.3, seed=seed)
    ds = synthetic(cfg, name="speech")
    ds.image_shape = (11, 40, 1)
    return ds
