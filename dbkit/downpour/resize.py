"""Which replicas a change of the number of replicas starts, holds back and stops: one rule, used by the
Downpour job on every runtime (``Fleet``) and by the simulator (``dbkit.sim``), so that ``set(replicas=n)``
means the same everywhere.

New replicas take new numbers (one more than any replica known); while the warm start is on (replicas
wait for replica 0 to train alone) new ones wait with them. Fewer replicas: the most recent leave first,
those still waiting before any that trains (DistBelief Sec. 4.1: a replica's leaving stops nothing else).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Resize:
    """What ``resize`` decided: replicas to ``start`` now, to ``hold`` back for the warm start, waiting
    ones to ``drop`` (never started), running ones to ``stop`` (most recent first)."""

    start: tuple[int, ...] = ()
    hold: tuple[int, ...] = ()
    drop: tuple[int, ...] = ()
    stop: tuple[int, ...] = ()


def resize(running: Iterable[int], waiting: Iterable[int], known: Iterable[int], n: int) -> Resize:
    """From ``running`` replicas and those ``waiting`` for the warm start (``known``: every number ever
    used) to ``n`` live replicas (running or waiting)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"replicas must be a whole number >= 1, got {n!r}")
    running, waiting = sorted(running), list(waiting)
    have = len(running) + len(waiting)
    if n > have:
        first = max([*known, *running, *waiting, -1]) + 1
        new = tuple(range(first, first + n - have))
        return Resize(hold=new) if waiting else Resize(start=new)
    k = have - n
    drop = tuple(waiting[::-1][:k])  # the most recently held back first
    return Resize(drop=drop, stop=tuple(running[::-1][:k - len(drop)]))
