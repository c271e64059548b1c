"""Parameter shards aligned to partitions (DistBelief Sec. 3 and 4.1).

"Each partition of a replica exchanges parameters only with the shards holding
its own parameters." A partition's parameters are scattered through the flat
vector (a dense layer's column block, say), so the server keeps the vector in
*partition-major order*: all of partition 0's parameters, then partition 1's,
and so on, each partition's block cut into shards of its own. Every shard then
holds one partition's parameters only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ps import ShardLayout, balanced_layout
from .ownership import Ownership


@dataclass(frozen=True)
class AlignedLayout:
    """The server's order of the parameters and its shards.

    Attributes
    ----------
    order : ndarray
        Server position ``p`` holds parameter ``order[p]`` of the flat vector.
    layout : ShardLayout
        The shards' ranges over the server's vector.
    blocks : tuple of (start, stop)
        Each partition's range of the server's vector.
    shards_of : tuple of tuple of int
        Each partition's shards.
    """

    order: np.ndarray
    layout: ShardLayout
    blocks: tuple[tuple[int, int], ...]
    shards_of: tuple[tuple[int, ...], ...]

    @property
    def partitions(self) -> int:
        return len(self.blocks)

    def to_server(self, values: np.ndarray) -> np.ndarray:
        """A vector in the network's order, put in the server's order."""
        return np.asarray(values)[self.order]

    def from_server(self, values: np.ndarray) -> np.ndarray:
        """A vector in the server's order, put back in the network's order."""
        values = np.asarray(values)
        out = np.empty_like(values)
        out[self.order] = values
        return out

    def partition_layout(self, part: int) -> ShardLayout:
        """Partition ``part``'s shards, with ranges counted from the start of its block."""
        start = self.blocks[part][0]
        ranges = tuple((self.layout.ranges[s][0] - start, self.layout.ranges[s][1] - start)
                       for s in self.shards_of[part])
        return ShardLayout(self.blocks[part][1] - start, ranges)

    def owner_of_shard(self, shard: int) -> int:
        return next(j for j, shards in enumerate(self.shards_of) if shard in shards)


def aligned_layout(ownership: Ownership, n_shards: int) -> AlignedLayout:
    """Order the parameters partition by partition and give each partition its own shards.

    The ``n_shards`` shards are split as evenly as possible over the ``ownership.k``
    partitions; each partition's block is then cut into balanced ranges. With
    one partition this is the plain balanced layout in the network's order.

    Raises
    ------
    ValueError
        If there are fewer shards than partitions, or than a block has parameters.
    """
    k = ownership.k
    if isinstance(n_shards, bool) or not isinstance(n_shards, (int, np.integer)) or n_shards < k:
        raise ValueError(f"shards must be at least partitions ({k}) so that every shard holds one "
                         f"partition's parameters, got shards={n_shards!r}")
    owner = ownership.param_owner
    order = np.argsort(owner, kind="stable")  # partition-major, network order within a partition
    counts = np.bincount(owner, minlength=k)
    per_part = [len(c) for c in np.array_split(np.arange(n_shards), k)]
    ranges: list[tuple[int, int]] = []
    blocks: list[tuple[int, int]] = []
    shards_of: list[tuple[int, ...]] = []
    start = 0
    for j in range(k):
        sub = balanced_layout(int(counts[j]), per_part[j])
        shards_of.append(tuple(range(len(ranges), len(ranges) + sub.n_shards)))
        ranges.extend((start + a, start + b) for a, b in sub.ranges)
        blocks.append((start, start + int(counts[j])))
        start += int(counts[j])
    return AlignedLayout(order, ShardLayout(int(owner.size), tuple(ranges)), tuple(blocks), tuple(shards_of))
