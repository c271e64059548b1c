"""Named vectors on a parameter shard: the history and the BLAS-1 operations Sandblaster needs.

DistBelief Sec. 4.2: in Sandblaster L-BFGS "the parameter server ... stores the
history of parameters and gradients on the shards"; the coordinator issues
small commands (dot product, scaling, coefficient-wise addition) and receives
only scalars. Each operation here acts on one shard's slice of every named
vector; the coordinator sums the scalars over shards. ``"params"`` names the
shard's parameters; other names (``"grad"``, ``"direction"``, ``"s3"``,
``"y3"``, ...) are created on first write.

``NamedVectors`` is a component the shard holds: it owns the vectors and which
work units landed in each, and is told the shard's parameters (an array it
writes in place) and what to do when it writes them (the shard's version goes
up). It takes no lock: the shard calls it under its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

PARAMS = "params"


class NamedVectors:
    """One shard's named vectors, its ``params`` among them; see the module docstring."""

    def __init__(self, index: int, params: np.ndarray, wrote_params: Callable[[], None]) -> None:
        self.index, self.params, self._wrote_params = index, params, wrote_params
        self.vectors: dict[str, np.ndarray] = {}
        self.landed: dict[str, set[int]] = {}  # work units accumulated into each vector since it was zeroed

    def get(self, name: str) -> np.ndarray:
        """Vector ``name`` itself (not a copy)."""
        if name == PARAMS:
            return self.params
        try:
            return self.vectors[name]
        except KeyError:
            raise KeyError(f"shard {self.index}: no vector named {name!r}; have {self.names()}") from None

    def out(self, name: str) -> np.ndarray:
        """Vector ``name`` to write into (made, zeroed, on first write; a write to the parameters is an update)."""
        if name == PARAMS:
            self._wrote_params()
            return self.params
        if name not in self.vectors:
            self.vectors[name] = np.zeros(self.params.size, dtype=np.float32)
        return self.vectors[name]

    def names(self) -> list[str]:
        return [PARAMS, *self.vectors]

    def zero(self, name: str) -> None:
        """Zero vector ``name`` and forget which work units landed in it."""
        self.out(name)[:] = 0.0
        self.landed[name] = set()

    def landed_units(self, name: str) -> list[int]:
        return sorted(self.landed.get(name, ()))

    def copy(self, src: str, dst: str) -> None:
        self.out(dst)[:] = self.get(src)

    def drop(self, name: str) -> None:
        if name == PARAMS:
            raise ValueError("the parameters cannot be dropped")
        self.vectors.pop(name, None)

    def dot(self, a: str, b: str) -> float:
        """This shard's part of ``a . b``, accumulated in float64."""
        return float(np.einsum("i,i->", self.get(a), self.get(b), dtype=np.float64))

    def axpy(self, alpha: float, x: str, y: str) -> None:
        """``y += alpha * x``."""
        xv = self.get(x)
        self.out(y)[:] += np.float32(alpha) * xv

    def scale(self, alpha: float, x: str) -> None:
        """``x *= alpha``."""
        self.out(x)[:] *= np.float32(alpha)

    def twice(self, name: str, units: tuple) -> list[int]:
        """Which of ``units`` already landed in ``name`` (a unit redone after its replica died mid-push)."""
        return sorted(self.landed.setdefault(name, set()).intersection(units))

    def add(self, name: str, values: np.ndarray, units: tuple) -> None:
        """``name += values``, the work units ``units`` now landed there."""
        self.out(name)[:] += values.astype(np.float32, copy=False)
        self.landed.setdefault(name, set()).update(units)
