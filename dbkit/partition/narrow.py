"""Index bookkeeping so a partition holds only the columns it owns or reads.

For partition j and layer l: ``own[l]`` are the output units j computes, and
``reads[l]`` the input units its part of layer l reads (its own units of layer
l-1 plus the boundary units received). A partition's part of a layer works on
these narrow arrays directly: a locally connected part's patch index is
renumbered into ``reads[l]``. Without this, every partition would carry
full-width activations, and the cost of a step would not shrink with K.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn import Dense, LocallyConnected
from .plan import Plan
from .traffic import inputs_used


@dataclass
class NarrowLayer:
    own: np.ndarray  # output units this partition computes (sorted)
    reads: np.ndarray  # input units it reads (sorted)
    sub: object  # the layer part on narrow arrays, or None for an elementwise layer
    slicer: object  # params dict of the whole layer -> params of the part
    own_in_reads: np.ndarray  # positions in ``reads`` of this partition's own units of layer l-1 (or -1)


def _position(sorted_units: np.ndarray, units: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(sorted_units, units)
    idx[idx >= sorted_units.size] = 0
    return np.where(sorted_units[idx] == units, idx, -1)


def narrow_layers(plan: Plan, j: int) -> list[NarrowLayer]:
    """The narrow view of every layer for partition ``j``."""
    net = plan.network
    out = []
    for l, layer in enumerate(net.layers):
        own = plan.units(l, j)
        reads = inputs_used(layer, own)
        prev_own = plan.units(l - 1, j) if l > 0 else np.arange(layer.in_size)
        if isinstance(layer, Dense):
            sub = Dense(layer.in_size, own.size)
            slicer = (lambda units: lambda p: {"W": p["W"][:, units], "b": p["b"][units]})(own)
        elif isinstance(layer, LocallyConnected):
            positions = np.unique(own // layer.filters)
            sub = LocallyConnected(_position(reads, layer.patch_index[positions]), reads.size, layer.filters)
            slicer = (lambda pos: lambda p: {"W": p["W"][pos], "b": p["b"][pos]})(positions)
        else:
            sub, slicer = None, None
        out.append(NarrowLayer(own, reads, sub, slicer, _position(reads, prev_own)))
    return out
