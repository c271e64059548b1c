"""The layer protocol shared by every numpy layer.

A layer is stateless: its parameters live in the network's flat vector and are
handed to ``forward`` and ``backward`` as a dict of named views. This is what
lets a parameter shard (DistBelief, Sec. 4) own a slice of the vector without
knowing anything about layers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Params = dict[str, np.ndarray]


class Layer:
    """Base class: a map from ``(batch, in_size)`` to ``(batch, out_size)``.

    Subclasses set ``in_size`` and ``out_size`` and implement ``forward`` and
    ``backward``. Parameterised layers also override ``param_shapes`` and
    ``init``. Parameters named ``"W"`` are weights (they get the L2 penalty);
    every other parameter (``"b"``) is a bias.
    """

    in_size: int
    out_size: int
    kind: str = "layer"
    stacks: bool = False  # forward and backward also take a stack of batches (replicas, batch, size)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of this layer's parameters, in flat-vector order."""
        return {}

    def init(self, rng: np.random.Generator) -> Params:
        """Seeded initial values for every parameter in ``param_shapes``."""
        return {}

    def forward(self, params: Params, x: np.ndarray) -> tuple[np.ndarray, Any]:
        """Return the output and a cache for ``backward``."""
        raise NotImplementedError

    def backward(self, params: Params, cache: Any, dout: np.ndarray,
                 need_dx: bool = True) -> tuple[np.ndarray | None, Params]:
        """Return the gradient with respect to the input and to each parameter.

        With ``need_dx=False`` (the first layer: nobody needs the gradient of
        the data) a layer may return ``None`` for the input gradient.
        """
        raise NotImplementedError

    def input_grad(self, params: Params, cache: Any, dout: np.ndarray) -> np.ndarray:
        """The gradient with respect to the input alone (what ``backward`` returns first).

        A partition computes it before its parameter gradient, to send the
        boundary part to its partners sooner (DistBelief Sec. 3).
        """
        dx = self.backward(params, cache, dout, need_dx=True)[0]
        assert dx is not None
        return dx

    def describe(self) -> str:
        return f"{self.kind}({self.in_size}->{self.out_size})"


def glorot(rng: np.random.Generator, fan_in: int, fan_out: int, shape: tuple[int, ...]) -> np.ndarray:
    """Glorot-uniform initial weights (float64; the network casts)."""
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape)
