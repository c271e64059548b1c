"""Loss and accuracy of a parameter vector, for histories and final reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..data import Dataset
from ..nn import Network


@dataclass(frozen=True)
class Evaluation:
    """Loss on a fixed training subset, loss and accuracy on the test set; ``full_batch_loss``
    (the objective over the whole training set) in final evaluations only."""

    train_loss: float
    test_loss: float
    test_accuracy: float
    full_batch_loss: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        if self.full_batch_loss is None:
            del d["full_batch_loss"]
        return d


class Evaluator:
    """Evaluates parameters on a fixed training subset and the test set.

    Parameters
    ----------
    max_train : int
        Size of the fixed, seeded training subset used for ``train_loss`` in
        the history (the full set is used by ``final``).
    """

    def __init__(self, network: Network, data: Dataset, max_train: int = 1000, seed: int = 0) -> None:
        self.network, self.data = network, data
        n = data.n_train
        idx = np.arange(n) if n <= max_train else np.random.default_rng(seed).choice(n, max_train, replace=False)
        self.X_sub, self.y_sub = data.X_train[idx], data.y_train[idx]

    def __call__(self, params: np.ndarray) -> Evaluation:
        """``train_loss`` (subset), ``test_loss`` and ``test_accuracy``."""
        net, d = self.network, self.data
        with np.errstate(all="ignore"):  # diverged parameters give inf or NaN, not warnings
            test_loss, logits = net.loss_and_logits(params, d.X_test, d.y_test)
            return Evaluation(float(net.loss(params, self.X_sub, self.y_sub)), float(test_loss),
                              float((logits.argmax(axis=1) == d.y_test).mean()))

    def final(self, params: np.ndarray) -> Evaluation:
        """As ``__call__`` plus ``full_batch_loss`` over the whole training set."""
        out = self(params)
        with np.errstate(all="ignore"):
            full = full_batch_loss(self.network, params, self.data.X_train, self.data.y_train)
        return Evaluation(out.train_loss, out.test_loss, out.test_accuracy, float(full))


def full_batch_loss(net: Network, params: np.ndarray, X: np.ndarray, y: np.ndarray, chunk: int = 4096) -> float:
    """The objective over all of ``X``: mean cross-entropy plus L2, in chunks."""
    total = 0.0
    for a in range(0, len(y), chunk):
        Xc, yc = X[a : a + chunk], y[a : a + chunk]
        total += (net.loss(params, Xc, yc) - net.penalty(params)) * len(yc)
    return total / len(y) + net.penalty(params)
