"""``signals``: 1-D signals in the style of MNIST-1D (Greydanus, 2020), generated here.

Ten hand-drawn templates of 12 points (one per class) are padded, stretched,
scaled, shifted around a ring, filled with correlated noise where the template
is absent, sheared and resampled to 40 points. The result is small enough for
one core and hard enough that settings differ visibly: an MLP reaches roughly
60-70% test accuracy and a model with local connectivity (``signal-local``)
does better, as on MNIST-1D. Nothing is downloaded; the same seed gives the
same data. These are not the published MNIST-1D files, so their numbers are
comparable only in spirit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataset import Dataset

TEMPLATES = np.array(
    [
        [5, 6, 6.5, 6.75, 7, 7, 7, 7, 6.75, 6.5, 6, 5],  # 0
        [5, 3, 3, 3.4, 3.8, 4.2, 4.6, 5, 5.4, 5.8, 5, 5],  # 1
        [5, 6, 6.5, 6.5, 6, 5.25, 4.75, 4, 3.5, 3.5, 4, 5],  # 2
        [5, 6, 6.5, 6.5, 6, 5, 5, 6, 6.5, 6.5, 6, 5],  # 3
        [5, 4.4, 3.8, 3.2, 2.6, 2.6, 5, 5, 5, 5, 5, 5],  # 4
        [5, 3, 3, 3, 3, 5, 6, 6.5, 6.5, 6, 4.5, 5],  # 5
        [5, 4, 3.5, 3.25, 3, 3, 3, 3, 3.25, 3.5, 4, 5],  # 6
        [5, 7, 7, 6.6, 6.2, 5.8, 5.4, 5, 4.6, 4.2, 5, 5],  # 7
        [5, 4, 3.5, 3.5, 4, 5, 5, 4, 3.5, 3.5, 4, 5],  # 8
        [5, 4, 3.5, 3.5, 4, 5, 5, 5, 5, 4.7, 4.3, 5],  # 9
    ]
)


@dataclass(frozen=True)
class SignalsConfig:
    """How the signals are made (MNIST-1D's defaults).

    Attributes
    ----------
    n_train, n_test : int
        Examples in each part.
    length : int
        Points per final signal.
    padding : tuple of int
        Zeros appended to a template before it is stretched, drawn in ``[low, high]``.
    scale, shear : float
        Amplitude of the random scaling and of the linear shear.
    max_shift : int
        Largest circular shift.
    correlated_noise, iid_noise : float
        Scale of the smoothed noise filling the padding, and of the noise added everywhere.
    """

    n_train: int = 8_000
    n_test: int = 2_000
    length: int = 40
    padding: tuple[int, int] = (36, 60)
    scale: float = 0.4
    max_shift: int = 48
    correlated_noise: float = 0.25
    iid_noise: float = 0.02
    shear: float = 0.75
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("n_train", "n_test", "max_shift"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.length < 8:
            raise ValueError(f"length must be >= 8, got {self.length}")
        low, high = self.padding
        if not 0 <= low <= high:
            raise ValueError(f"padding must be 0 <= low <= high, got {self.padding}")


def _templates() -> np.ndarray:
    x = TEMPLATES - TEMPLATES.mean(axis=1, keepdims=True)
    x /= x.std(axis=1, keepdims=True)
    x -= x[:, :1]  # every template starts and ends at 0
    return x / 6.0


def _resample(x: np.ndarray, n: int) -> np.ndarray:
    """Linear interpolation of each row of ``x`` onto ``n`` evenly spaced points."""
    old = np.linspace(0.0, 1.0, x.shape[-1])
    new = np.linspace(0.0, 1.0, n)
    return np.stack([np.interp(new, old, row) for row in x])


def _smooth(noise: np.ndarray, sigma: float = 2.0) -> np.ndarray:
    """Gaussian smoothing along the last axis (reflecting edges), numpy only."""
    radius = int(4 * sigma + 0.5)
    t = np.arange(-radius, radius + 1)
    kernel = np.exp(-0.5 * (t / sigma) ** 2)
    kernel /= kernel.sum()
    padded = np.pad(noise, ((0, 0), (radius, radius)), mode="symmetric")
    return np.stack([np.convolve(row, kernel, mode="valid") for row in padded])


def make_signals(config: SignalsConfig = SignalsConfig()) -> tuple[np.ndarray, np.ndarray]:
    """All ``n_train + n_test`` examples, as ``(X float32 (n, length), y int64)``."""
    c = config
    rng = np.random.default_rng(c.seed)
    n = c.n_train + c.n_test
    templates = _templates()
    y = rng.integers(0, len(templates), n)
    width = templates.shape[1] + c.padding[1]
    X = np.empty((n, width))
    for i, label in enumerate(y):
        pad = rng.integers(c.padding[0], c.padding[1] + 1)
        X[i] = _resample(np.concatenate([templates[label] + 1e-8, np.zeros(pad)])[None], width)[0]
    X *= 1 + c.scale * (rng.random((n, 1)) - 0.5)
    shifts = rng.integers(0, c.max_shift, n)
    X = np.stack([np.roll(row, k) for row, k in zip(X, shifts)])
    absent = X == 0
    X = np.where(absent, _smooth(c.correlated_noise * rng.standard_normal(X.shape)), X)
    X += c.iid_noise * rng.standard_normal(X.shape)
    X -= c.shear * (rng.random((n, 1)) - 0.5) * np.linspace(-0.5, 0.5, width)[None]
    return _resample(X, c.length).astype(np.float32), y.astype(np.int64)


def signals(seed: int = 0, small: bool = False) -> Dataset:
    """The ``signals`` dataset: 10 classes of 40-point signals (4,000 training examples when small)."""
    n_train, n_test = (4_000, 1_000) if small else (8_000, 2_000)
    X, y = make_signals(SignalsConfig(n_train=n_train, n_test=n_test, seed=seed))
    return Dataset(X[:n_train], y[:n_train], X[n_train:], y[n_train:], name="signals", n_classes=10)
