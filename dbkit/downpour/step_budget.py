"""The steps a Downpour job's replicas may still take, kept as one common budget would, on every runtime.

``fit(steps=N)`` and a run's ``steps`` count steps over all replicas (issue #48: capping each replica at
N ran 600 steps for ``--steps 300`` with 2 replicas). The count is exact without changing how the replicas
run: the steps left are shared among the live replicas (``Fleet.share_caps``), equally, and once their
speeds are known to differ, in proportion to them, so that they reach their shares together, as replicas
taking tickets from one counter would. The shares are worked out again whenever replicas come or go, all
of them wait with steps left (on real machines, any of them: a replica's speed there is known only roughly),
or their speeds differ (on real machines at most every ``RESHARE_EVERY`` seconds: a share that changes caps
is a call to every worker).

On real machines a running replica steps on between the poll a share is worked out from and its new cap's
arrival, so the caps there are changed through ``StepGrants`` (``Fleet.share_exactly``): lowered before
they are raised, each answered with the cap set (never below the steps begun), so that the caps in force
never add up to more than the total (a share that changes no cap sends nothing). In virtual time a share
reaches its replicas at a known instant; a share worked out while replicas run there keeps ``HELD_BACK``
steps a replica back (a replica polled at 59 steps that takes two more before its new cap of 61 arrives
would end a step over: 241 of 240 steps). Once every replica waits at its cap, their figures are exact and
the rest is shared out whole, so the total is the one asked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .fleet import Fleet

#: steps each replica takes before its speed weighs in its share, and how much faster the fastest must then
#: be than the slowest (below it, equal replicas a step apart in phase would seem unequal)
SPEED_STEPS, SPEED_SPREAD = 5, 1.25

#: steps per live replica kept back from a share while replicas run: a replica may step on between the poll
#: its share is worked out from and the new cap's arrival, and a cap below its steps then cannot hold it
HELD_BACK = 2

#: on real machines, the fewest seconds between shares made because the replicas' speeds differ
RESHARE_EVERY = 0.5


class StepBudget:
    """The total steps ``fleet`` 's replicas may reach (``cap``; ``math.inf``: none), shared among them;
    ``clock`` reads virtual seconds (a replica's speed is its steps since the budget first saw it)."""

    def __init__(self, fleet: Fleet, clock: Callable[[], float], real_time: bool = False) -> None:
        self.fleet, self.clock, self.real_time = fleet, clock, real_time
        self.reshare_every = RESHARE_EVERY if real_time else 0.0
        self._shared_at = -math.inf
        self.cap = math.inf
        self._seen: dict[int, float] = {}  # replica -> when it was first seen here
        self._shared_with: set[int] = set()  # the live replicas at the last share
        #: the total at which the replicas wait for what a share held back (a poll is aimed there; None: none)
        self.waypoint: int | None = None

    def aim(self, cap: float) -> None:
        """The replicas may reach ``cap`` steps in all: each launched from now on at most what is left, the
        live ones their shares of it."""
        self.cap = cap
        self.waypoint = None  # (a share sets it again: an old target's must not aim a later fit's polls)
        if math.isinf(cap):
            self.fleet.set_caps(None)
        elif self.fleet.live():
            self.share()
        else:
            self.fleet.set_caps(max(0, int(cap) - self.fleet.total_steps()))

    def review(self, total: int, held: bool = False) -> None:
        """After a poll (``total`` steps so far): share again if replicas came or went, their speeds
        differ, or all of them wait with steps left. On real machines a fleet ``held`` (paused by the job)
        is not shared again: the caps in force (``StepGrants``) hold, and the next fit aims afresh; a share
        there only re-weighted paused replicas' speeds, a call to every worker at every poll."""
        fleet = self.fleet
        if total >= self.cap or (held and self.real_time):
            return
        paused = [f.state == "paused" for f in fleet.figures().values() if f.live]
        # on real machines a replica at its share takes more as soon as a poll sees it wait, as it would take
        # tickets from a counter; in virtual time a share is exact, and only all waiting is shared again
        waiting = any(paused) if self.real_time else all(paused)
        differ = self.clock() - self._shared_at >= self.reshare_every and self.speeds() is not None
        if set(fleet.live()) != self._shared_with or differ or waiting:
            self.share()

    def share(self) -> None:
        """Share what is left among the live replicas: equally, or in proportion to their speeds. While any
        runs, ``HELD_BACK`` steps a replica are kept back (see the module docstring); once all wait at their
        caps, their figures are exact and the rest is shared out whole."""
        live = self.fleet.live()
        if not (math.isfinite(self.cap) and live):
            return
        self._shared_with, self._shared_at = set(live), self.clock()
        if self.real_time:  # exact from the caps in force (``StepGrants``): nothing held back
            self.waypoint = None
            self.fleet.share_exactly(int(self.cap), self.speeds())
            return
        figures = self.fleet.figures()
        running = any(figures[i].state != "paused" for i in live)
        left = max(0, int(self.cap) - self.fleet.total_steps())
        held = min(left, HELD_BACK * len(live)) if running else 0
        self.waypoint = int(self.cap) - held if held else None
        self.fleet.share_caps(left, self.speeds(), held_back=held)

    def speeds(self) -> dict[int, float] | None:
        """Each live replica's steps per virtual second since first seen, once each has taken ``SPEED_STEPS``
        and the fastest is ``SPEED_SPREAD`` times the slowest; else ``None`` (alike, as far as can be told)."""
        now, figures, live = self.clock(), self.fleet.figures(), self.fleet.live()
        since = {i: now - self._seen.setdefault(i, now) for i in live}
        if not live or not all(figures[i].steps >= SPEED_STEPS and since[i] > 0 for i in live):
            return None
        speeds = {i: figures[i].steps / since[i] for i in live}
        return speeds if max(speeds.values()) > SPEED_SPREAD * min(speeds.values()) else None
