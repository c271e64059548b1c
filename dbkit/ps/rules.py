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

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None,
              scratch: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Update ``params`` (and ``state``) in place with one gradient.

        ``scratch``: two float32 buffers the size of ``params`` for the
        intermediate terms, so that no full-length temporary is allocated. The
        arithmetic, and so the result, is the same either way.
        """
        if scratch is None:  # allocate what this rule needs: one buffer for SGD, two for Adagrad
            a = np.empty_like(params)
            scratch = (a, np.empty_like(params) if self.optimizer == "adagrad" else a)
        a, b = scratch
        self.apply_scaled(params, grad, self.scale(grad, a), state, b)

    def scale(self, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``lr * grad`` into ``out`` (the first term of either rule); returns ``out``."""
        return np.multiply(grad, np.float32(self.lr), out=out)

    def apply_scaled(self, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray, state: np.ndarray | None,
                     spare: np.ndarray) -> None:
        """The rest of ``apply`` once ``scaled = scale(grad)`` (which it overwrites); ``spare`` is scratch."""
        if self.optimizer == "sgd":
            params -= scaled
        else:
            assert state is not None
            np.multiply(grad, grad, out=spare)
            state += spare
            np.sqrt(state, out=spare)
            spare += np.float32(self.eps)
            scaled /= spare  # lr * grad / (sqrt(state) + eps)
            params -= scaled


def check_lr(lr: float) -> float:
    """Return ``lr`` as a float if it is in the settings table's range, else raise a clear error."""
    return float(check("lr", lr))
