"""Fully connected layer: every output unit sees every input unit.

In a partitioned model (DistBelief Sec. 3) this is the layer whose partitions
must exchange all activations: its connectivity is all-to-all.
"""

from __future__ import annotations

import numpy as np

from .layer import Layer, Params, glorot


class Dense(Layer):
    """``y = x @ W + b`` with ``W`` of shape ``(in_size, out_size)``; ``gain`` scales its Glorot-uniform initial
    weights (4 before a logistic sigmoid, as Glorot and Bengio (2010) derive: the sigmoid's slope at 0 is 1/4)."""

    kind = "dense"
    stacks = True

    def __init__(self, in_size: int, out_size: int, gain: float = 1.0) -> None:
        if in_size < 1 or out_size < 1:
            raise ValueError(f"Dense sizes must be >= 1, got in_size={in_size}, out_size={out_size}")
        if not gain > 0:
            raise ValueError(f"Dense gain must be > 0, got {gain}")
        self.gain = float(gain)
        self.in_size = int(in_size)
        self.out_size = int(out_size)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"W": (self.in_size, self.out_size), "b": (self.out_size,)}

    def init(self, rng: np.random.Generator) -> Params:
        W = self.gain * glorot(rng, self.in_size, self.out_size, (self.in_size, self.out_size))
        return {"W": W, "b": np.zeros(self.out_size)}

    def forward(self, params: Params, x: np.ndarray):
        return x @ params["W"] + params["b"], x

    def backward(self, params: Params, cache, dout: np.ndarray, need_dx: bool = True):
        x = cache
        # swapaxes and axis -2, not .T and axis 0: the same arithmetic on one batch, and on a stack of
        # replicas' batches (Network.loss_and_grad_stacked) each matrix of the stack on its own
        grads = {"W": np.swapaxes(x, -1, -2) @ dout, "b": dout.sum(axis=-2)}
        return (self.input_grad(params, cache, dout) if need_dx else None), grads

    def input_grad(self, params: Params, cache, dout: np.ndarray) -> np.ndarray:
        return dout @ np.swapaxes(params["W"], -1, -2)
