"""Named vectors on a parameter shard and the BLAS-1 operations Sandblaster needs.

DistBelief Sec. 4.2: in Sandblaster L-BFGS "the parameter server ... stores the
history of parameters and gradients on the shards"; the coordinator issues
small commands (dot product, scaling, coefficient-wise addition) and receives
only scalars. Each operation here acts on this shard's slice of every named
vector; the coordinator sums the scalars over shards. ``"params"`` names the
shard's parameters; other names (``"grad"``, ``"direction"``, ``"s3"``,
``"y3"``, ...) are created on first write.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from .records import PushAnswer

PARAMS = "params"


class VectorOps:
    """Mixin for ``ParameterShard``: named vectors and operations returning scalars."""

    index: int
    version: int
    fetches: int
    rejected: int
    bytes_fetched: int
    bytes_pushed: int
    params: np.ndarray
    vectors: dict[str, np.ndarray]
    landed: dict[str, set]
    rejections: Counter[str]
    _lock: threading.Lock

    @property
    def size(self) -> int:
        raise NotImplementedError  # the shard's

    def _advance(self, examples: int = 0) -> None: ...

    def _aligned(self, values: np.ndarray) -> np.ndarray:
        raise NotImplementedError  # the shard's

    def _refusal(self, grad: np.ndarray, fetched_version: int) -> str | None: ...

    def _refuse(self, reason: str) -> PushAnswer:
        raise NotImplementedError  # the shard's

    def _vec(self, name: str) -> np.ndarray:
        if name == PARAMS:
            return self.params
        try:
            return self.vectors[name]
        except KeyError:
            raise KeyError(f"shard {self.index}: no vector named {name!r}; have {self.vector_names()}") from None

    def _out(self, name: str) -> np.ndarray:
        if name == PARAMS:
            self._advance()  # a write to the parameters is an update
            return self.params
        if name not in self.vectors:
            self.vectors[name] = np.zeros(self.size, dtype=np.float32)
        return self.vectors[name]

    def vector_names(self) -> list[str]:
        return [PARAMS, *self.vectors]

    def zero(self, name: str) -> None:
        """Zero vector ``name`` and forget which work units landed in it."""
        with self._lock:
            self._out(name)[:] = 0.0
            self.landed[name] = set()

    def landed_units(self, name: str) -> list[int]:
        """Work units whose gradients were accumulated into ``name`` since it was zeroed."""
        with self._lock:
            return sorted(self.landed.get(name, ()))

    def copy(self, src: str, dst: str) -> None:
        with self._lock:
            values = self._vec(src)
            self._out(dst)[:] = values

    def drop(self, name: str) -> None:
        with self._lock:
            if name == PARAMS:
                raise ValueError("the parameters cannot be dropped")
            self.vectors.pop(name, None)

    def dot(self, a: str, b: str) -> float:
        """This shard's part of ``a . b``, accumulated in float64."""
        with self._lock:
            return float(np.einsum("i,i->", self._vec(a), self._vec(b), dtype=np.float64))

    def axpy(self, alpha: float, x: str, y: str) -> None:
        """``y += alpha * x``."""
        with self._lock:
            xv = self._vec(x)
            out = self._out(y)
            out += np.float32(alpha) * xv

    def scale(self, alpha: float, x: str) -> None:
        """``x *= alpha``."""
        with self._lock:
            self._out(x)[:] *= np.float32(alpha)

    def accumulate(self, name: str, values: np.ndarray, units: tuple = ()) -> PushAnswer:
        """``name += values`` (a replica's summed gradient slice); refused like a bad push.

        ``units`` names the work units summed in ``values``. A bundle containing
        a unit that already landed here is refused, so a unit redone after its
        replica died mid-push is never counted twice on this shard.
        """
        with self._lock:
            values = self._aligned(values)
            twice = self.landed.setdefault(name, set()).intersection(units)
            if twice:
                return PushAnswer(False, self.version, reason=f"duplicate: units {sorted(twice)} already landed")
            reason = self._refusal(values, 0)
            if reason is not None:
                return self._refuse(reason)
            self._out(name)[:] += values.astype(np.float32, copy=False)
            self.landed[name].update(units)
            self.bytes_pushed += values.size * 4
            return PushAnswer(True, self.version)

    def fetch_vector(self, name: str) -> tuple[int, np.ndarray]:
        """``(version, copy of vector name)``; ``fetch()`` is ``fetch_vector("params")``."""
        with self._lock:
            values = self._vec(name)
            self.fetches += 1
            self.bytes_fetched += values.nbytes
            return self.version, values.copy()
