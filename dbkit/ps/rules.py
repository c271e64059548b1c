"""Update rules a parameter shard applies to the gradients pushed to it.

Both act in place on float32 slices. Adagrad's per-parameter accumulator lives
beside the parameters, in the shard that owns them (DistBelief Sec. 4.1:
"Adagrad ... is easily implemented locally within each parameter shard").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..settings import OPTIMIZERS, check


@dataclass(frozen=True)
class UpdateRule:
    """``sgd``: ``p -= lr * g``. ``adagrad``: ``a += g**2; p -= lr * g / (sqrt(a) + eps)``.

    ``initial_accumulator`` starts every Adagrad accumulator above zero, so the
    first steps are not huge.
    """

    optimizer: str = "sgd"
    lr: float = 0.1
    eps: float = 1e-8
    initial_accumulator: float = 0.1

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        check_lr(self.lr)
        if not (self.eps > 0 and self.initial_accumulator >= 0):
            raise ValueError("eps must be > 0 and initial_accumulator >= 0")

    def new_state(self, size: int) -> np.ndarray | None:
        """Fresh optimizer state for ``size`` parameters (Adagrad's accumulator, or None)."""
        if self.optimizer == "adagrad":
            return np.full(size, self.initial_accumulator, dtype=np.float32)
        return None

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None) -> None:
        """Update ``params`` (and ``state``) in place with one gradient."""
        lr = np.float32(self.lr)
        if self.optimizer == "sgd":
            params -= lr * grad
        else:
            state += grad * grad
            params -= lr * grad / (np.sqrt(state) + np.float32(self.eps))


def check_lr(lr: float) -> float:
    """Return ``lr`` as a float if it is in the settings table's range, else raise a clear error."""
    return float(check("lr", lr))
