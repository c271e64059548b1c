"""What replicas may ask of a parameter shard about each other: their clocks, and who arrived first in a round.

Downpour's replicas never talk to each other (DistBelief Sec. 4.1). The ideas
that bound or drop stale work need a little shared knowledge, and the shards
are the one place every replica already talks to, so shard 0 keeps it:

- **Stale Synchronous Parallel** (Ho et al. 2013) needs each replica's clock
  (the steps it has finished) and the slowest live one's: ``tick``.
- **Synchronous SGD with backup workers** (Chen et al. 2016) needs, per round,
  the order in which replicas arrived (the first N - b count, the rest are
  dropped) and how many have: ``arrive`` and ``arrived``.

A replica that pauses or stops ``leave``s (the others no longer wait for it);
the driver makes one that was lost leave (``dbkit.downpour.fleet``).
"""

from __future__ import annotations

import threading
from collections import defaultdict


class ReplicaClocks:
    """The clocks of the live replicas and, per round, the order they arrived in."""

    def __init__(self) -> None:
        # lock order: leaf (clocks and arrivals; taken alone, never with the shard's own lock)
        self._lock = threading.Lock()
        self._clocks: dict[str, int] = {}
        self._arrivals: dict[int, list[str]] = defaultdict(list)
        self.widest = 0  # the largest spread of clocks seen (fastest - slowest)

    def tick(self, name: str, clock: int) -> int:
        """Record that ``name`` has finished ``clock`` steps; return the slowest live replica's clock."""
        with self._lock:
            self._clocks[str(name)] = int(clock)
            slowest = min(self._clocks.values())
            self.widest = max(self.widest, max(self._clocks.values()) - slowest)
            return slowest

    def leave(self, name: str) -> None:
        """``name`` no longer trains (paused, stopped or lost): nobody waits for it."""
        with self._lock:
            self._clocks.pop(str(name), None)

    def live(self) -> int:
        """How many replicas have a clock (the N of a synchronous round)."""
        with self._lock:
            return len(self._clocks)

    def arrive(self, name: str, round_: int) -> int:
        """``name`` brings its gradient for round ``round_``: its rank among the arrivals (0 first)."""
        with self._lock:
            arrivals = self._arrivals[int(round_)]
            if name not in arrivals:
                arrivals.append(str(name))
            for old in [r for r in self._arrivals if r < int(round_) - 8]:  # a few rounds back are enough
                del self._arrivals[old]
            return arrivals.index(str(name))

    def arrived(self, round_: int) -> int:
        """How many replicas have arrived in round ``round_``."""
        with self._lock:
            return len(self._arrivals.get(int(round_), ()))
