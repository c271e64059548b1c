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
    n, classes = logits.shape[-2:]
    logp = log_softmax(logits)
    # each example's label picked out of its row of classes by flat fancy indexing, which costs one call
    # where ``take_along_axis`` costs a dozen (it is most of the loss of a small batch)
    rows, labels = np.arange(y.size), y.reshape(-1)
    losses = -logp.reshape(-1, classes)[rows, labels].reshape(y.shape).mean(axis=-1)
    dlogits = np.exp(logp)
    dlogits.reshape(-1, classes)[rows, labels] -= 1.0  # a view: writes into dlogits
    return (float(losses) if logits.ndim == 2 else losses), dlogits / n
