"""Datasets, splits, disjoint shards for replicas and mini-batches (numpy only)."""

from __future__ import annotations

import os
from pathlib import Path

from .batches import MiniBatches, shard_indices, standardize
from .dataset import DataError, Dataset
from .files import MAX_DATA_BYTES, load_idx, load_npz, read_idx
from .signals import SignalsConfig, make_signals, signals
from .sources import SyntheticConfig, digits, speech, synthetic

BUILTIN = ("digits", "signals", "synthetic", "speech")


def small() -> bool:
    """True when ``DBKIT_SMALL=1``: CI, Binder and quick demos use small sizes."""
    return os.environ.get("DBKIT_SMALL", "") not in ("", "0")


def load(name_or_path: str = "digits", seed: int = 0, standardized: bool = True,
         max_bytes: int = MAX_DATA_BYTES) -> Dataset:
    """Load a dataset by name (``digits``, ``signals``, ``synthetic``, ``speech``) or local path.

    A path is either an ``.npz`` file with ``X_train y_train X_test y_test`` or
    a folder of MNIST-format IDX files. Features are standardised with
    training-set statistics unless ``standardized=False``. A file whose arrays would take more than
    ``max_bytes`` decompressed is refused before they are read.
    """
    if name_or_path == "digits":
        ds = digits(seed)
    elif name_or_path == "signals":
        ds = signals(seed, small=small())
    elif name_or_path == "synthetic":
        n = (2_000, 500) if small() else (10_000, 2_000)
        ds = synthetic(SyntheticConfig(n_train=n[0], n_test=n[1], seed=seed))
    elif name_or_path == "speech":
        ds = speech(seed, small=small())
    else:
        path = Path(name_or_path)
        if path.suffix == ".npz" or path.is_file():
            ds = load_npz(path, max_bytes)
        elif path.is_dir():
            ds = load_idx(path, max_bytes)
        else:
            raise DataError(
                f"{name_or_path}: not a built-in dataset ({', '.join(BUILTIN)}) and no such file or folder"
            )
    return standardize(ds) if standardized else ds


__all__ = [
    "BUILTIN", "Dataset", "DataError", "MiniBatches", "SignalsConfig", "SyntheticConfig", "digits", "load",
    "load_idx", "load_npz", "make_signals", "read_idx", "shard_indices", "signals", "small", "speech",
    "standardize", "synthetic",
]
