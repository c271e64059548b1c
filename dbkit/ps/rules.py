"""The paper's two update rules a parameter shard applies: SGD and Adagrad (DistBelief Sec. 4.1).

Both act in place on float32 slices, each term into scratch so that a push
allocates nothing. Adagrad's per-parameter accumulator lives beside the
parameters, in the shard that owns them ("Adagrad ... is easily implemented
locally within each parameter shard"). Other rules register through
``dbkit.ps.update_rule``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..settings import OPTIMIZERS, check, knob
from .update_rule import UpdateRule, register_rule


@register_rule
@dataclass(frozen=True)
class SGD(UpdateRule):
    """Plain SGD: p -= lr * g."""

    name: ClassVar[str] = "sgd"

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None, staleness: int = 0) -> None:
        params -= np.float32(self.lr) * grad

    def apply_scaled(self, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray, state: np.ndarray | None,
                     spare: np.ndarray, staleness: int = 0) -> None:
        params -= scaled


@register_rule
@dataclass(frozen=True)
class Adagrad(UpdateRule):
    """Adagrad (Duchi et al. 2011): a += g**2; p -= lr * g / (sqrt(a) + eps).

    ``initial_accumulator`` starts every accumulator above zero, so the first steps are not huge.
    """

    name: ClassVar[str] = "adagrad"
    keeps_state: ClassVar[bool] = True
    state_nonnegative: ClassVar[bool] = True
    eps: float = knob(1e-8, "float", 0.0, 1.0, lo_open=True, help="Adagrad: added to sqrt(accumulator)")
    initial_accumulator: float = knob(0.1, "float", 0.0, 1e6, help="Adagrad: every accumulator's first value")

    def new_state(self, size: int) -> np.ndarray | None:
        return np.full(size, self.initial_accumulator, dtype=np.float32)

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None, staleness: int = 0) -> None:
        a = np.empty_like(params)
        self.apply_scaled(params, grad, self.scale(grad, a), state, np.empty_like(params))

    def apply_scaled(self, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray, state: np.ndarray | None,
                     spare: np.ndarray, staleness: int = 0) -> None:
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


__all__ = ["OPTIMIZERS", "SGD", "Adagrad", "check_lr"]
