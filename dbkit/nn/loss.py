"""The loss used everywhere in dbkit (DESIGN.md): mean softmax cross-entropy
over the examples plus ``(l2 / 2) * ||W||^2`` over weights, biases excluded."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable ``log(softmax(logits))`` along the last axis."""
    z = logits - logits.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits.

    Parameters
    ----------
    logits : ndarray, shape (batch, classes)
    y : ndarray of int, shape (batch,)
        Class labels in ``[0, classes)``.
    """
    n = logits.shape[0]
    logp = log_softmax(logits)
    loss = -float(logp[np.arange(n), y].mean())
    dlogits = np.exp(logp)
    dlogits[np.arange(n), y] -= 1.0
    return loss, dlogits / n
