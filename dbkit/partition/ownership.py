"""Which partition owns which units and parameters (DistBelief Sec. 3, model parallelism).

A network is split into K partitions layer by layer: a fully connected layer's
output units in K contiguous blocks; a locally connected layer's output
*positions* in K bands of rows (1-D: runs of positions), so neighbouring
regions share only a boundary. Elementwise layers follow their input. Every
parameter belongs to the partition that owns the unit it feeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..nn import Dense, LocallyConnected, LocallyConnected2D, Network


@dataclass(frozen=True, eq=False)
class Ownership:
    """``owner[l][u]``: the partition owning output unit ``u`` of layer ``l``, for ``k`` partitions."""

    network: Network
    k: int
    owner: tuple[np.ndarray, ...]

    def units(self, layer: int, part: int) -> np.ndarray:
        return np.flatnonzero(self.owner[layer] == part)

    @cached_property
    def param_owner(self) -> np.ndarray:
        """For every entry of the flat parameter vector, the partition that owns it (computed once)."""
        out = np.empty(self.network.size, dtype=np.int32)
        for spec in self.network.specs:
            layer = self.network.layers[spec.layer]
            own = self.owner[spec.layer]
            if isinstance(layer, Dense):
                block = np.broadcast_to(own, spec.shape) if spec.key == "W" else own
            elif isinstance(layer, LocallyConnected):
                pos = own.reshape(layer.positions, layer.filters)  # owner per (position, filter)
                block = np.broadcast_to(pos[:, None, :], spec.shape) if spec.key == "W" else pos
            else:
                raise TypeError(f"no parameters expected on {layer.describe()}")
            out[spec.start : spec.stop] = np.asarray(block).ravel()
        return out

    def param_indices(self, part: int) -> np.ndarray:
        return np.flatnonzero(self.param_owner == part)


def _split(n: int, k: int) -> np.ndarray:
    owner = np.empty(n, dtype=np.int32)
    for p, block in enumerate(np.array_split(np.arange(n), k)):
        owner[block] = p
    return owner


def ownership(network: Network, k: int) -> Ownership:
    """Split ``network`` into ``k`` partitions by units, layer by layer.

    Raises ``ValueError`` when a layer has fewer units (or rows of positions) than ``k``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"partitions must be a whole number >= 1, got {k!r}")
    owners: list[np.ndarray] = []
    for i, layer in enumerate(network.layers):
        if isinstance(layer, LocallyConnected):
            if isinstance(layer, LocallyConnected2D):
                rows, cols = layer.out_shape[0], layer.out_shape[1]
                if rows < k:
                    raise ValueError(f"layer {i} ({layer.describe()}) has {rows} rows of positions, fewer than "
                                     f"{k} partitions")
                pos_owner = np.repeat(_split(rows, k), cols)
            else:
                if layer.positions < k:
                    raise ValueError(f"layer {i} ({layer.describe()}) has {layer.positions} positions, fewer "
                                     f"than {k} partitions")
                pos_owner = _split(layer.positions, k)
            owners.append(np.repeat(pos_owner, layer.filters))
        elif isinstance(layer, Dense):
            if layer.out_size < k:
                raise ValueError(f"layer {i} ({layer.describe()}) has {layer.out_size} units, fewer than {k} "
                                 "partitions")
            owners.append(_split(layer.out_size, k))
        else:  # elementwise: same units as its input
            if i == 0:
                raise ValueError("a partitioned network must start with a dense or locally connected layer")
            owners.append(owners[-1].copy())
    return Ownership(network, k, tuple(owners))
