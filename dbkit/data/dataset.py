"""A train/test dataset in memory, validated once when it is made."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class DataError(ValueError):
    """A dataset file or array is missing, malformed or non-finite."""


MAX_CLASSES = 100_000  # the paper's largest task, ImageNet 21k, has 21,841

@dataclass
class Dataset:
    """Training and test examples with integer class labels.

    ``X_*`` are float32 of shape ``(n, features)``; ``y_*`` are int64 in
    ``[0, n_classes)``. ``image_shape`` is ``(height, width, channels)`` when
    the features are a flattened image.
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    name: str = "custom"
    image_shape: tuple[int, int, int] | None = None
    n_classes: int = field(default=0)

    def __post_init__(self) -> None:
        self.X_train, self.y_train = _check_pair(self.X_train, self.y_train, self.name, "train")
        self.X_test, self.y_test = _check_pair(self.X_test, self.y_test, self.name, "test")
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise DataError(
                f"{self.name}: X_train has {self.X_train.shape[1]} features but X_test has {self.X_test.shape[1]}"
            )
        top = int(max(self.y_train.max(), self.y_test.max())) + 1
        if top > MAX_CLASSES:
            raise DataError(f"{self.name}: labels go up to {top - 1:,}, so the model would have {top:,} outputs "
                            f"(dbkit allows at most {MAX_CLASSES:,} classes); number the classes 0..K-1")
        self.n_classes = max(self.n_classes or 0, top)
        if self.n_classes < 2:
            raise DataError(f"{self.name}: labels must cover at least 2 classes, found {self.n_classes}")
        if self.image_shape is not None and int(np.prod(self.image_shape)) != self.n_features:
            raise DataError(f"{self.name}: image shape {self.image_shape} does not match {self.n_features} features")

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    def summary(self) -> dict:
        return {
            "name": self.name,
            "n_train": self.n_train,
            "n_test": int(self.X_test.shape[0]),
            "n_features": self.n_features,
            "n_classes": self.n_classes,
            "image_shape": list(self.image_shape) if self.image_shape else None,
        }


def _check_pair(X, y, name: str, part: str) -> tuple[np.ndarray, np.ndarray]:
    X = np.asarray(X)
    y = np.asarray(y)
    if X.ndim < 2:
        raise DataError(f"{name}: X_{part} must have one row per example (2-D or more), got shape {X.shape}")
    if X.shape[0] == 0 or X.size == 0:
        raise DataError(f"{name}: X_{part} is empty (shape {X.shape})")
    X = X.reshape(X.shape[0], -1)
    if y.ndim != 1:
        raise DataError(f"{name}: y_{part} must be 1-D, got shape {y.shape}")
    if X.shape[0] != y.shape[0]:
        raise DataError(f"{name}: X_{part} has {X.shape[0]} rows but y_{part} has {y.shape[0]} labels")
    if not np.issubdtype(X.dtype, np.number) or np.issubdtype(X.dtype, np.complexfloating):
        raise DataError(f"{name}: X_{part} must be real numbers, got dtype {X.dtype}")
    X = X.astype(np.float32)
    if not np.isfinite(X).all():
        bad = int((~np.isfinite(X)).sum())
        raise DataError(f"{name}: X_{part} has {bad} non-finite values (NaN or inf)")
    if not np.issubdtype(y.dtype, np.number):
        raise DataError(f"{name}: y_{part} must be integer class labels, got dtype {y.dtype}")
    if not np.isfinite(y).all() or (y != np.round(y)).any() or (y < 0).any():
        raise DataError(f"{name}: y_{part} must be integer class labels >= 0")
    return X, y.astype(np.int64)
