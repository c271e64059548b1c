"""A partitioned network run in process: each partition computes only its own
units and exchanges only boundary activations and gradients, counted in bytes.

This is the reference for partitioned execution: its loss and gradient must
equal the unpartitioned network's, and the bytes it moves must equal
``boundary_floats`` (the minimum the connectivity requires).
"""

from __future__ import annotations

import numpy as np

from ..nn import Dense, LocallyConnected, Network, softmax_cross_entropy
from .ownership import Ownership, ownership
from .traffic import needs


def _sub_layer(layer, units: np.ndarray):
    """The part of ``layer`` computing ``units`` (output indices), and how to slice its parameters."""
    if isinstance(layer, Dense):
        return Dense(layer.in_size, len(units)), lambda p: {"W": p["W"][:, units], "b": p["b"][units]}
    positions = np.unique(units // layer.filters)
    sub = LocallyConnected(layer.patch_index[positions], layer.in_size, layer.filters)
    return sub, lambda p: {"W": p["W"][positions], "b": p["b"][positions]}


class PartitionedNetwork:
    """``network`` split into ``k`` partitions; ``loss_and_grad`` as the unpartitioned network's.

    ``bytes_between_partitions`` accumulates what crossed partition boundaries.
    """

    def __init__(self, network: Network, k: int) -> None:
        self.network = network
        self.ownership: Ownership = ownership(network, k)
        self.k = k
        self.needs = [needs(self.ownership, layer) for layer in range(len(network.layers))]
        self.subs = {(l, j): _sub_layer(layer, self.ownership.units(l, j)) for l, layer in enumerate(network.layers)
                     if isinstance(layer, (Dense, LocallyConnected)) for j in range(k)}
        self.bytes_between_partitions = 0

    def _send(self, values: np.ndarray) -> np.ndarray:
        self.bytes_between_partitions += values.size * 4  # float32 on the wire
        return values

    def loss_and_grad(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        net, ownership, k = self.network, self.ownership, self.k
        views = net.views(params)
        X = np.asarray(X, dtype=params.dtype)
        batch = X.shape[0]
        acts = [X] * k  # partition j's view of the previous layer's outputs (only what it owns or received)
        caches = []
        for l, layer in enumerate(net.layers):
            out_size = layer.out_size
            new: list[np.ndarray] = []
            layer_caches: list[tuple] = []
            for j in range(k):
                units = ownership.units(l, j)
                if l > 0:  # receive the boundary units this partition needs
                    x = acts[j].copy()
                    for (i, jj), u in self.needs[l].items():
                        if jj == j:
                            x[:, u] = self._send(acts[i][:, u])
                else:
                    x = acts[j]
                full = np.zeros((batch, out_size), dtype=params.dtype)
                if isinstance(layer, (Dense, LocallyConnected)):
                    sub, slicer = self.subs[(l, j)]
                    out, cache = sub.forward(slicer(views[l]), x)
                    full[:, units] = out
                    layer_caches.append((sub, slicer, cache, x))
                else:  # elementwise on its own units
                    out, cache = layer.forward({}, x[:, units])
                    full[:, units] = out
                    layer_caches.append((None, None, cache, None))
                new.append(full)
            acts = new
            caches.append(layer_caches)
        # the loss needs all logits in one place: partition 0
        last = ownership.owner[-1]
        logits = acts[0].copy()
        for i in range(1, k):
            mine = last == i
            logits[:, mine] = self._send(acts[i][:, mine])
        loss, dlogits = softmax_cross_entropy(logits, y)
        loss += net.penalty(params)
        douts = []
        for j in range(k):
            d = np.zeros_like(dlogits)
            mine = last == j
            d[:, mine] = self._send(dlogits[:, mine]) if j else dlogits[:, mine]
            douts.append(d)
        grad = np.zeros_like(params)
        for l in range(len(net.layers) - 1, -1, -1):
            layer = net.layers[l]
            dins = []
            for j in range(k):
                units = ownership.units(l, j)
                sub, slicer, cache, x = caches[l][j]
                if sub is None:
                    dx_own, _ = layer.backward({}, cache, douts[j][:, units])
                    dx = np.zeros((douts[j].shape[0], layer.in_size), dtype=params.dtype)
                    dx[:, units] = dx_own
                else:
                    dx, g = sub.backward(slicer(views[l]), cache, douts[j][:, units], need_dx=l > 0)
                    self._scatter_grad(grad, l, layer, units, g)
                dins.append(dx)
            if l == 0:
                break
            # each partition keeps the gradient of its own units, plus what others send back for them
            douts = []
            for i in range(k):
                d = np.zeros_like(dins[i])
                own = ownership.owner[l - 1] == i
                d[:, own] = dins[i][:, own]
                for (owner_i, j), u in self.needs[l].items():
                    if owner_i == i:
                        d[:, u] += self._send(dins[j][:, u])
                douts.append(d)
        if net.l2:
            grad += net.penalty_grad(params)
        return loss, grad

    def _scatter_grad(self, grad: np.ndarray, l: int, layer, units: np.ndarray, g: dict) -> None:
        add_sub_grad(self.network.views(grad)[l], layer, units, g)


def add_sub_grad(views: dict, layer, units: np.ndarray, g: dict) -> None:
    """Add a sub-layer's parameter gradient ``g`` (for output ``units``) into the layer's gradient views."""
    if isinstance(layer, Dense):
        views["W"][:, units] += g["W"]
        views["b"][units] += g["b"]
    else:
        positions = np.unique(units // layer.filters)
        views["W"][positions] += g["W"]
        views["b"][positions] += g["b"]
