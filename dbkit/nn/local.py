"""Locally connected layers: each output unit sees a local receptive field
with its own, unshared weights (DistBelief's image model, Sec. 3).

Unlike a convolution, no weights are shared between positions, so the layer
has ``positions * field * filters`` weights. Its locality is what makes model
partitioning pay: a partition of output positions needs only the inputs in its
receptive fields, so only a boundary crosses between partitions.

Inputs are flattened row-major: a 1-D input of shape ``(length, channels)``
and a 2-D input of shape ``(height, width, channels)``. Outputs are flattened
the same way, with ``filters`` as the channel axis.
"""

from __future__ import annotations

import numpy as np

from .layer import Layer, Params, glorot


def _out_len(n: int, k: int, s: int, what: str) -> int:
    if k < 1 or s < 1:
        raise ValueError(f"{what}: kernel and stride must be >= 1, got kernel={k}, stride={s}")
    if k > n:
        raise ValueError(f"{what}: kernel {k} is larger than the input extent {n}")
    return (n - k) // s + 1


class LocallyConnected(Layer):
    """Generic locally connected layer given a patch index.

    Parameters
    ----------
    patch_index : ndarray of int, shape (positions, field)
        ``patch_index[p]`` lists the flat input units seen by output position ``p``.
    in_size : int
        Number of input units.
    filters : int
        Output units per position.
    """

    kind = "local"

    def __init__(self, patch_index: np.ndarray, in_size: int, filters: int) -> None:
        if filters < 1:
            raise ValueError(f"filters must be >= 1, got {filters}")
        self.patch_index = np.asarray(patch_index, dtype=np.intp)
        self.positions, self.field = self.patch_index.shape
        self.filters = int(filters)
        self.in_size = int(in_size)
        self.out_size = self.positions * self.filters

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"W": (self.positions, self.field, self.filters), "b": (self.positions, self.filters)}

    def init(self, rng: np.random.Generator) -> Params:
        W = glorot(rng, self.field, self.filters, (self.positions, self.field, self.filters))
        return {"W": W, "b": np.zeros((self.positions, self.filters))}

    stacks = True  # a stack of replicas' batches: (R, batch, in_size), each replica's products on their own

    def forward(self, params: Params, x: np.ndarray):
        # one batch: patches (P, B, K) @ W (P, K, F); a stack: (R, P, B, K) @ (R, P, K, F), the same products
        patches = np.swapaxes(x[..., self.patch_index], -3, -2)  # (..., P, B, K)
        out = np.swapaxes(np.matmul(patches, params["W"]), -3, -2)  # (..., B, P, F)
        out = out + (params["b"] if x.ndim == 2 else params["b"][:, None])
        return out.reshape(x.shape[:-1] + (self.out_size,)), patches

    def _positions_first(self, dout: np.ndarray) -> np.ndarray:
        """``dout`` (..., B, P*F) as (..., P, B, F)."""
        return np.swapaxes(dout.reshape(dout.shape[:-1] + (self.positions, self.filters)), -3, -2)

    def backward(self, params: Params, cache, dout: np.ndarray, need_dx: bool = True):
        patches = cache
        d = self._positions_first(dout)  # (..., P, B, F)
        grads = {
            "W": np.matmul(np.swapaxes(patches, -1, -2), d),
            "b": d.sum(axis=-2),
        }
        return (self.input_grad(params, cache, dout) if need_dx else None), grads

    def input_grad(self, params: Params, cache, dout: np.ndarray) -> np.ndarray:
        d = self._positions_first(dout)  # (..., P, B, F)
        dpatch = np.matmul(d, np.swapaxes(params["W"], -1, -2))  # (..., P, B, K)
        # Scatter-add every (position, field offset) back to its input unit: one sparse product instead of a
        # loop over the field. Its columns are the examples (of every replica of a stack): each column's
        # sum is the same whatever the others.
        lead, batch = dout.shape[:-2], dout.shape[-2]
        n = int(np.prod(lead, dtype=np.int64)) * batch
        cols = np.moveaxis(np.moveaxis(dpatch, -1, -2), (-3, -2), (0, 1)).reshape(self.positions * self.field, n)
        dx = (self._scatter() @ cols).T  # (stack * B, in_size)
        return np.ascontiguousarray(dx.reshape(lead + (batch, self.in_size)), dtype=dout.dtype)

    def _scatter(self):
        """The (in_size x positions*field) 0/1 matrix mapping patch entries to input units (cached)."""
        if getattr(self, "_scatter_matrix", None) is None:
            from scipy.sparse import csr_matrix

            n = self.patch_index.size
            self._scatter_matrix = csr_matrix((np.ones(n, dtype=np.float32), (self.patch_index.ravel(), np.arange(n))),
                                              shape=(self.in_size, n))
        return self._scatter_matrix


class LocallyConnected1D(LocallyConnected):
    """1-D locally connected layer over ``(length, channels)`` inputs."""

    kind = "local1d"

    def __init__(self, length: int, channels: int, kernel: int, filters: int, stride: int = 1) -> None:
        out_len = _out_len(length, kernel, stride, "LocallyConnected1D")
        starts = np.arange(out_len) * stride
        pos = starts[:, None] + np.arange(kernel)[None, :]  # (P, kernel)
        idx = (pos[:, :, None] * channels + np.arange(channels)[None, None, :]).reshape(out_len, -1)
        super().__init__(idx, length * channels, filters)
        self.in_shape = (length, channels)
        self.out_shape = (out_len, filters)
        self.kernel, self.stride = kernel, stride

    def describe(self) -> str:
        return f"local1d({self.in_shape}->{self.out_shape}, kernel={self.kernel}, stride={self.stride})"


class LocallyConnected2D(LocallyConnected):
    """2-D locally connected layer over ``(height, width, channels)`` inputs."""

    kind = "local2d"

    def __init__(
        self, height: int, width: int, channels: int, kernel: int, filters: int, stride: int = 1
    ) -> None:
        oh = _out_len(height, kernel, stride, "LocallyConnected2D")
        ow = _out_len(width, kernel, stride, "LocallyConnected2D")
        r0 = (np.arange(oh) * stride)[:, None, None, None]
        c0 = (np.arange(ow) * stride)[None, :, None, None]
        dr = np.arange(kernel)[None, None, :, None]
        dc = np.arange(kernel)[None, None, None, :]
        pix = (r0 + dr) * width + (c0 + dc)  # (oh, ow, k, k)
        idx = pix[..., None] * channels + np.arange(channels)  # (oh, ow, k, k, C)
        super().__init__(idx.reshape(oh * ow, -1), height * width * channels, filters)
        self.in_shape = (height, width, channels)
        self.out_shape = (oh, ow, filters)
        self.kernel, self.stride = kernel, stride

    def describe(self) -> str:
        return f"local2d({self.in_shape}->{self.out_shape}, kernel={self.kernel}, stride={self.stride})"
