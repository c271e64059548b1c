"""Staleness-aware learning rates: a shard divides each push's step by its staleness.

Zhang, Gupta, Lian and Liu, "Staleness-aware Async-SGD for Distributed Deep
Learning", IJCAI 2016, Sec. 3: a gradient computed ``tau`` updates ago is
applied with rate ``lr / tau``, so the more replicas push between a replica's
fetch and its push, the less its (older) gradient moves the parameters. The
shard knows ``tau`` exactly: it is the push's staleness, the updates this
shard applied since the pushing replica fetched (DistBelief Sec. 4.1). A
fresh push (staleness 0, as with one replica) counts as 1: plain SGD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ps.update_rule import UpdateRule, register_rule


@register_rule
@dataclass(frozen=True)
class StalenessAwareSGD(UpdateRule):
    """SGD with the step divided by the push's staleness (Zhang et al. 2016): p -= (lr / max(1, tau)) * g."""

    name: ClassVar[str] = "staleness-aware"

    def rate(self, staleness: int) -> np.float32:
        """The rate a push of this staleness is applied with."""
        return np.float32(self.lr / max(1, int(staleness)))

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None, staleness: int = 0) -> None:
        params -= self.rate(staleness) * grad

    def apply_scaled(self, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray, state: np.ndarray | None,
                     spare: np.ndarray, staleness: int = 0) -> None:
        np.multiply(grad, self.rate(staleness), out=spare)  # lr * grad was checked finite: so is this
        params -= spare
