"""A picture of a partitioned network (DistBelief Sec. 3, Figure 1 in spirit).

One panel per layer with parameters: a locally connected layer as its grid of
output positions, a dense layer as a strip of units, each coloured by the
partition that owns it. Units whose activations must be sent to another
partition are marked with a dot: for a locally connected layer only a band at
the boundary, for a dense layer feeding another dense layer all of them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _sent_units(ownership, layer: int) -> np.ndarray:
    """Units of ``layer``'s output that another partition reads (looking through elementwise layers)."""
    from ..nn import Dense, LocallyConnected
    from ..partition import needs

    sent: set[int] = set()
    for m in range(layer + 1, len(ownership.network.layers)):
        for units in needs(ownership, m).values():
            sent.update(int(u) for u in units)
        if isinstance(ownership.network.layers[m], (Dense, LocallyConnected)):
            break
    return np.array(sorted(sent), dtype=np.intp)


def _strip_step(n: int, most: int = 128) -> int:
    """Draw at most ``most`` cells of a long strip of units."""
    return -(-n // most)


def plot_partitions(network, k: int, path: str | Path | None = None):
    """Draw ``network`` split into ``k`` partitions; returns the matplotlib ``Figure`` (saved to ``path`` if given).

    The title of each panel gives the units per partition and how many of the
    layer's outputs another partition reads, which the dots mark (issue #44: the
    title counted inputs while the dots marked outputs).
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure

    from ..nn import Dense, LocallyConnected2D
    from ..partition import describe
    from ..partition import ownership as assign

    p = assign(network, k)
    rows = describe(network, k)
    layers = [r["layer"] for r in rows if sum(r["params_per_partition"])]
    fig = Figure(figsize=(3.2 * len(layers), 3.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(layers)))
    cmap = ListedColormap([f"C{j % 10}" for j in range(k)])
    for ax, i in zip(axes, layers):
        layer, owner, sent = network.layers[i], p.owner[i], _sent_units(p, i)
        if isinstance(layer, LocallyConnected2D):  # the grid of output positions
            oh, ow, f = layer.out_shape
            ax.imshow(owner.reshape(oh, ow, f)[:, :, 0], cmap=cmap, vmin=-0.5, vmax=k - 0.5)
            pos = np.unique(sent // f)
            ax.scatter(pos % ow, pos // ow, s=18, c="white", edgecolors="black", linewidths=0.5)
        else:  # a strip of units (every step-th one if long)
            step = _strip_step(owner.size)
            ax.imshow(owner[::step][None, :], cmap=cmap, vmin=-0.5, vmax=k - 0.5, aspect="auto")
            xs = np.unique(sent // step)
            ax.scatter(xs, np.zeros_like(xs), s=10, c="white", edgecolors="black", linewidths=0.4)
        r = rows[i]
        kind = "dense" if isinstance(layer, Dense) else layer.kind
        ax.set_title(f"layer {i}: {kind}\nunits {r['units_per_partition']}\n"
                     f"outputs another partition reads (dots): {len(sent):,}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle(f"{network.name} in {k} partitions (colour: owner; dot: activation another partition reads)",
                 fontsize=9)
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    return fig
