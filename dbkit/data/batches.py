"""Standardisation, disjoint data shards for replicas, and mini-batches.

In Downpour SGD (DistBelief Sec. 4.1) every model replica trains on its own
subset of the data: ``shard_indices`` cuts the training set into disjoint,
nearly equal parts.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .dataset import Dataset


def standardize(ds: Dataset) -> Dataset:
    """Zero mean, unit variance per feature, with statistics from the training set.

    Constant features (e.g. the blank corners of digits) are centred only.
    """
    mean = ds.X_train.mean(axis=0)
    std = ds.X_train.std(axis=0)
    std[std < 1e-8] = 1.0
    return Dataset(
        (ds.X_train - mean) / std, ds.y_train, (ds.X_test - mean) / std, ds.y_test,
        name=ds.name, image_shape=ds.image_shape, n_classes=ds.n_classes,
    )


def shard_indices(n: int, n_shards: int, seed: int = 0) -> list[np.ndarray]:
    """Disjoint, nearly equal index sets covering ``range(n)``, after a seeded shuffle."""
    if not 1 <= n_shards <= n:
        raise ValueError(f"n_shards must be in [1, {n}] for {n} examples, got {n_shards}")
    order = np.random.default_rng(seed).permutation(n)
    return [np.sort(part) for part in np.array_split(order, n_shards)]


class MiniBatches:
    """An endless, seeded stream of mini-batches from (a subset of) the data.

    Each epoch is a fresh permutation; the last partial batch of an epoch is
    dropped so every batch has exactly ``batch_size`` examples (or all of
    them, if the subset is smaller).
    """

    def __init__(self, X: np.ndarray, y: np.ndarray, batch_size: int, seed: int = 0) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if len(X) != len(y) or len(X) == 0:
            raise ValueError(f"need matching, non-empty X and y, got {len(X)} and {len(y)}")
        self.X, self.y = X, y
        self.batch_size = min(int(batch_size), len(y))
        self.rng = np.random.default_rng(seed)
        self.epoch = 0
        self._order = np.empty(0, dtype=np.intp)
        self._pos = 0

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        if self._pos + self.batch_size > len(self._order):
            self._order = self.rng.permutation(len(self.y))
            self._pos = 0
            self.epoch += 1
        idx = self._order[self._pos : self._pos + self.batch_size]
        self._pos += self.batch_size
        return self.X[idx], self.y[idx]
