"""How the flat parameter vector is cut into shards (DistBelief Sec. 4.1)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShardLayout:
    """Contiguous, balanced ranges ``[start, stop)`` of a vector of ``size`` parameters."""

    size: int
    ranges: tuple[tuple[int, int], ...]

    @property
    def n_shards(self) -> int:
        return len(self.ranges)

    def sizes(self) -> list[int]:
        return [b - a for a, b in self.ranges]

    def owner(self, index: int) -> int:
        """Which shard holds parameter ``index``."""
        for s, (a, b) in enumerate(self.ranges):
            if a <= index < b:
                return s
        raise IndexError(f"parameter index {index} outside [0, {self.size})")


def balanced_layout(size: int, n_shards: int) -> ShardLayout:
    """Cut ``size`` parameters into ``n_shards`` contiguous ranges differing by at most one.

    Raises
    ------
    ValueError
        If ``n_shards`` is not in ``[1, size]``.
    """
    if size < 1:
        raise ValueError(f"a layout needs at least one parameter, got size={size}")
    if not 1 <= n_shards <= size:
        raise ValueError(f"shards must be in [1, {size}] for {size} parameters, got {n_shards}")
    base, extra = divmod(size, n_shards)
    ranges, start = [], 0
    for s in range(n_shards):
        stop = start + base + (1 if s < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ShardLayout(size, tuple(ranges))
