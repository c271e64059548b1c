"""When a simulated driver looks at its replicas next: at the virtual instant its next target should be
reached (an evaluation, the warm start's end, half of what is left of a budget) at the speed of the last
polls. A real driver polls on a timer; in virtual time a timer either wastes events (steps far apart) or
misses targets (steps close together), so the driver aims its polls instead."""

from __future__ import annotations

import math

#: the first poll (each next one twice as far until the replicas' speed is known), and the bounds of those
#: aimed at a target (the longest: a job's, whose panel shows the figures as last polled; a run on its own
#: waits as long as its next target is away)
FIRST_POLL, SHORTEST_POLL, LONGEST_POLL = 1e-4, 1e-4, 1.0


class PollTimer:
    """The driver's next poll; ``driven``: a job's run (its polls at most ``LONGEST_POLL`` apart)."""

    def __init__(self, driven: bool) -> None:
        self.longest = LONGEST_POLL if driven else math.inf
        self.rate: float | None = None  # steps per virtual second of one replica, over the last polls
        self._last = (0.0, 0, 0)
        self._probe = FIRST_POLL

    def polled(self, now: float, total: int, live: int) -> None:
        """A poll at ``now`` found ``total`` steps and ``live`` replicas (those that took them since the last:
        a replica's rate, times the replicas, says when a target comes even after many join). An interval
        that began before any step is not timed: the replicas may have started within it (a task takes its
        message's time to start)."""
        t0, s0, n0 = self._last
        if now > t0 and total > s0 > 0 and n0 > 0:
            rate = (total - s0) / (now - t0) / n0
            self.rate = rate if self.rate is None else 0.5 * (self.rate + rate)
        self._last = (now, total, live)

    def next(self, total: int, targets: list[float], cap: float, live: int, left: float = math.inf) -> float:
        """Virtual seconds to the next poll, ``total`` steps done by ``live`` replicas: when the nearest of
        ``targets`` (step counts) or half of what is left of ``cap`` should be reached, and within ``left``."""
        ahead = [float(t - total) for t in targets if t > total]
        if cap > total:
            ahead.append(max(1.0, (cap - total) / 2))
        if self.rate is None or not ahead or live == 0:
            seconds, self._probe = self._probe, min(self.longest, 2 * self._probe)
        else:
            seconds = min(ahead) / (self.rate * live)
        return min(self.longest, max(SHORTEST_POLL, min(seconds, left)))
