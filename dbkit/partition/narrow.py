"""Index bookkeeping so a partition holds only the columns it owns or reads.

For partition j and layer l: ``own[l]`` are the output units j computes, and
``reads[l]`` the input units its part of layer l reads (its own units of layer
l-1 plus the boundary units received). A partition's part of a layer works on
these narrow arrays directly: a locally connected part's patch index is
renumbered into ``reads[l]``. Without this, every partition would carry
full-width activations, and the cost of a step would not shrink with K.

A partition's parameters are one flat vector too, holding only its own
entries in the order of ``Ownership.param_indices`` (the server's block for it);
``own_segments`` cuts it into the parameters of its layer parts. Units are
contiguous blocks and positions contiguous bands, so that order is exactly
each part's parameters laid out row-major, and the part's parameters and
gradients are views of the vector, never gathered copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn import Dense, Layer, LocallyConnected
from .ownership import Ownership
from .traffic import inputs_used


@dataclass
class NarrowLayer:
    own: np.ndarray  # output units this partition computes (sorted)
    reads: np.ndarray  # input units it reads (sorted)
    sub: Layer | None  # the layer part on narrow arrays, or None for an elementwise layer
    own_in_reads: np.ndarray  # positions in ``reads`` of this partition's own units of layer l-1 (or -1)


def _position(sorted_units: np.ndarray, units: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(sorted_units, units)
    idx[idx >= sorted_units.size] = 0
    return np.where(sorted_units[idx] == units, idx, -1)


def narrow_layers(ownership: Ownership, j: int) -> list[NarrowLayer]:
    """The narrow view of every layer for partition ``j``."""
    net = ownership.network
    out = []
    for l, layer in enumerate(net.layers):
        own = ownership.units(l, j)
        reads = inputs_used(layer, own)
        prev_own = ownership.units(l - 1, j) if l > 0 else np.arange(layer.in_size)
        sub: Layer | None
        if isinstance(layer, Dense):
            sub = Dense(layer.in_size, own.size)
        elif isinstance(layer, LocallyConnected):
            positions = np.unique(own // layer.filters)
            sub = LocallyConnected(_position(reads, layer.patch_index[positions]), reads.size, layer.filters)
        else:
            sub = None
        out.append(NarrowLayer(own, reads, sub, _position(reads, prev_own)))
    return out


@dataclass(frozen=True)
class Segment:
    """Parameter ``key`` of layer ``layer``'s part: ``own[start:stop]`` reshaped to ``shape``."""

    layer: int
    key: str
    start: int
    stop: int
    shape: tuple[int, ...]
    is_weight: bool


def own_segments(ownership: Ownership, j: int, narrow: list[NarrowLayer] | None = None) -> list[Segment]:
    """Where each layer part's parameters sit in partition ``j``'s own vector.

    Raises ``ValueError`` if the parts' sizes do not add up to the partition's
    parameters (an ownership whose blocks are not contiguous).
    """
    narrow = narrow if narrow is not None else narrow_layers(ownership, j)
    out, start = [], 0
    for spec in ownership.network.specs:
        part = narrow[spec.layer].sub
        assert part is not None  # a layer with parameters has a part
        shape = tuple(part.param_shapes()[spec.key])
        size = int(np.prod(shape))
        out.append(Segment(spec.layer, spec.key, start, start + size, shape, spec.is_weight))
        start += size
    owned = int((ownership.param_owner == j).sum())
    if start != owned:
        raise ValueError(f"partition {j}: its parts hold {start} parameters, it owns {owned}")
    return out


def segment_views(values: np.ndarray, segments: list[Segment], n_layers: int) -> list[dict]:
    """Per layer, the part's named parameters as views of ``values`` (a partition's own vector)."""
    views: list[dict] = [{} for _ in range(n_layers)]
    for s in segments:
        views[s.layer][s.key] = values[s.start : s.stop].reshape(s.shape)
    return views
