"""The coordinator of SSP and backup sync: the replicas' clocks, and who arrived first in a round.

Downpour's replicas never talk to each other (DistBelief Sec. 4.1). The ideas
that bound or drop stale work need a little shared knowledge; this coordinator
(``dbkit.downpour.coordinators``), placed beside shard 0, keeps it:

- **Stale Synchronous Parallel** (Ho et al. 2013) needs each replica's clock
  (the steps it has finished) and the slowest live one's (``tick``), and the
  step each has begun, its parameters read, and the earliest such step
  (``began``): a push must not reach a replica still to read for a step
  more than s before it.
- **Synchronous SGD with backup workers** (Chen et al. 2016) needs, per round,
  the order in which replicas arrived (the first N - b count, the rest are
  dropped), when they have all arrived, and when a round is over: ``arrive``,
  ``decided``, ``land`` and ``current``.

A replica that pauses or stops ``leave``s (the others no longer wait for it);
the driver makes one that was lost leave (``dbkit.downpour.fleet``).
"""

from __future__ import annotations

import threading
from typing import ClassVar

from ..downpour.coordinators import register_coordinator


@register_coordinator
class ReplicaClocks:
    """The clocks of the live replicas and, per round, the order they arrived in."""

    name: ClassVar[str] = "replica-clocks"

    def __init__(self) -> None:
        # lock order: leaf (clocks and arrivals; taken alone, never with the shard's own lock)
        self._lock = threading.Lock()
        self._clocks: dict[str, int] = {}
        self._began: dict[str, int] = {}  # the step each live replica computes (its parameters read)
        self._rounds: dict[int, _Round] = {}
        self._current = 0  # the first round not yet over
        self.widest = 0  # the largest spread of clocks seen (fastest - slowest)

    def tick(self, name: str, clock: int) -> int:
        """Record that ``name`` has finished ``clock`` steps; return the slowest live replica's clock."""
        with self._lock:
            self._clocks[str(name)] = int(clock)
            self._began.setdefault(str(name), int(clock) - 1)  # a newcomer has read for no step yet
            slowest = min(self._clocks.values())
            self.widest = max(self.widest, max(self._clocks.values()) - slowest)
            return slowest

    def leave(self, name: str) -> None:
        """``name`` no longer trains (paused, stopped or lost): nobody waits for it, and a round it was
        counted in needs one gradient fewer."""
        with self._lock:
            self._clocks.pop(str(name), None)
            self._began.pop(str(name), None)
            entry = self._rounds.get(self._current)
            if entry is not None:
                entry.needed = min(entry.needed, max(1, len(self._clocks) - entry.backups))
                self._close(self._current, entry)

    def began(self, name: str, step: int) -> int:
        """Record that ``name`` has read its parameters for step ``step`` (counted from 0) and computes it;
        return the earliest step a live replica has so begun (a replica with a clock that has begun none:
        its clock less one)."""
        with self._lock:
            if str(name) in self._clocks:
                self._began[str(name)] = int(step)
            return min(self._began.values(), default=int(step))

    def live(self) -> int:
        """How many replicas have a clock (the N of a synchronous round)."""
        with self._lock:
            return len(self._clocks)

    def arrive(self, name: str, round_: int, backups: int) -> tuple[int, int, int]:
        """``name`` brings its gradient for round ``round_``: ``(rank, needed, current)``. The first
        ``needed`` (the live replicas less ``backups``, fixed by the round's first arrival) count; a later
        one, or one for a round already over, gets a rank of at least ``needed``: its gradient is dropped.
        ``current`` is the first round not yet over."""
        with self._lock:
            if round_ < self._current:  # the round is over: a straggler's gradient, too late
                return LATE, 1, self._current
            entry = self._rounds.setdefault(int(round_), _Round(max(1, len(self._clocks) - int(backups)),
                                                                int(backups)))
            entry.arrivals.append(str(name))
            return len(entry.arrivals) - 1, entry.needed, self._current

    def decided(self, round_: int) -> bool:
        """Whether round ``round_``'s counted gradients have all arrived (or the round is over): from then on
        they may be applied, as every one of them was computed on the parameters the round started from."""
        with self._lock:
            entry = self._rounds.get(int(round_))
            return int(round_) < self._current or (entry is not None and len(entry.arrivals) >= entry.needed)

    def land(self, round_: int) -> int:
        """A counted gradient of round ``round_`` has been applied by every shard; the current round."""
        with self._lock:
            entry = self._rounds.get(int(round_))
            if entry is not None:
                entry.landed += 1
                self._close(int(round_), entry)
            return self._current

    def _close(self, round_: int, entry: _Round) -> None:
        """End round ``round_`` if it has had the gradients it needs (the lock held)."""
        if entry.landed >= entry.needed:
            self._current = max(self._current, round_ + 1)
            for old in [r for r in self._rounds if r < self._current - 8]:  # a few rounds back suffice
                del self._rounds[old]

    def current(self) -> int:
        """The first round not yet over: every round before it has had its ``needed`` gradients applied."""
        with self._lock:
            return self._current


LATE = 2**31  # the rank of a gradient that came after its round was over


class _Round:
    """One synchronous round: how many gradients it needs, who arrived, how many were applied."""

    def __init__(self, needed: int, backups: int) -> None:
        self.needed, self.backups = needed, backups
        self.arrivals: list[str] = []
        self.landed = 0
