"""Where one replica's partitions run, over a list of machines (DistBelief Sec. 3)."""

from __future__ import annotations


def partition_places(index: int, partitions: int, machines: int) -> list[int]:
    """Machine numbers for replica ``index``'s ``partitions`` partitions: round-robin over ``machines``,
    partition after partition. When the partitions divide the machines evenly, each wrap-around shifts by
    one, or every replica's partition 0 (and its driver) would land on the same machines."""
    first = index * partitions
    first += first // machines if machines % partitions == 0 else 0
    return [(first + j) % machines for j in range(partitions)]
