"""What crosses partition boundaries: for every layer, which input units each
partition needs from each other partition (forward activations, and the same
units' gradients backward).

A unit of layer l-1 owned by partition i is needed by partition j != i when it
feeds any unit of layer l that j owns. For a fully connected layer that is all
of i's units (all-to-all); for a locally connected one only the rows where
receptive fields cross the boundary.
"""

from __future__ import annotations

import numpy as np

from ..nn import Dense, LocallyConnected
from .ownership import Ownership
from .ownership import ownership as assign


def inputs_used(layer, out_units: np.ndarray) -> np.ndarray:
    """Input units read by the given output units of ``layer`` (sorted, unique)."""
    if isinstance(layer, Dense):
        return np.arange(layer.in_size)
    if isinstance(layer, LocallyConnected):
        positions = np.unique(out_units // layer.filters)
        return np.unique(layer.patch_index[positions].ravel())
    return np.unique(out_units)  # elementwise


def needs(ownership: Ownership, layer: int) -> dict[tuple[int, int], np.ndarray]:
    """``{(i, j): units}``: layer ``layer``'s input units owned by ``i`` that partition ``j`` needs (i != j).

    Layer 0's inputs are the data, which every partition reads itself: no entries.
    """
    if layer == 0:
        return {}
    lay = ownership.network.layers[layer]
    prev_owner = ownership.owner[layer - 1]
    out = {}
    for j in range(ownership.k):
        used = inputs_used(lay, ownership.units(layer, j))
        for i in range(ownership.k):
            if i != j:
                units = used[prev_owner[used] == i]
                if units.size:
                    out[(i, j)] = units
    return out


def boundary_floats(ownership: Ownership) -> dict:
    """Floats crossing boundaries per example: per layer, forward and backward, plus the logits.

    The loss needs every logit in one place (partition 0): the other partitions'
    logits go there, and their gradients come back.
    """
    per_layer = [sum(u.size for u in needs(ownership, layer).values())
                 for layer in range(len(ownership.network.layers))]
    last = ownership.owner[-1]
    logits = int((last != 0).sum())
    return {"per_layer": per_layer, "forward": sum(per_layer) + logits, "backward": sum(per_layer) + logits}


def describe(network, k: int) -> list[dict]:
    """Per layer: units and parameters per partition, and floats sent across boundaries per example.

    For a notebook table of a partitioned network (``dbkit.partition.describe``).
    """
    p = assign(network, k)
    owner = p.param_owner
    rows = []
    for i, layer in enumerate(network.layers):
        params = [0] * k
        for spec in network.specs:
            if spec.layer == i:
                params = [params[q] + int((owner[spec.start : spec.stop] == q).sum()) for q in range(k)]
        cross = sum(u.size for u in needs(p, i).values())
        rows.append({"layer": i, "kind": layer.describe(),
                     "units_per_partition": [int((p.owner[i] == q).sum()) for q in range(k)],
                     "params_per_partition": params, "cross_floats_per_example": cross})
    return rows
