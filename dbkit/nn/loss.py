"""The loss used everywhere in dbkit (DESIGN.md): mean softmax cross-entropy
over the examples plus ``(l2 / 2) * ||W||^2`` over weights, biases excluded."""

from __future__ import annotations

from typing import Any

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable ``log(softmax(logits))`` along the last axis."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def softmax_cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[Any, np.ndarray]:
    """Mean cross-entropy and its gradient with respect to the logits.

    Parameters
    ----------
    logits : ndarray, shape (batch, classes), or (replicas, batch, classes) for a stack of batches
    y : ndarray of int, shape (batch,), or (replicas, batch)
        Class labels in ``[0, classes)``.

    Returns
    -------
    loss : float, or an array of one loss per batch of the stack
    dlogits : ndarray, the shape of ``logits``
    """
    n = logits.shape[-2]
    logp = log_softmax(logits)
    picked = y[..., None]  # each example's label, as an index into its row of classes
    losses = -np.take_along_axis(logp, picked, -1)[..., 0].mean(axis=-1)
    dlogits = np.exp(logp)
    np.put_along_axis(dlogits, picked, np.take_along_axis(dlogits, picked, -1) - 1.0, -1)
    return (float(losses) if logits.ndim == 2 else losses), dlogits / n
