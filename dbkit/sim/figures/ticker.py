"""Progress lines while a simulated figure runs: a long method run says how far it has got.

A figure runs several simulations, each of which can take tens of real seconds
(200 replicas, or 2,000 for Sandblaster). ``Ticker`` is told each evaluation's
simulated seconds and accuracy (``JobRun.on_evaluation``) and passes a
line to the figure's ``progress`` callback at most every ``every`` real seconds,
so a notebook cell or the CLI is never silent for long (issue #44).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class Ticker:
    """Throttled progress lines for one method run of ``budget`` simulated seconds (``None``: of steps)."""

    def __init__(self, say: Callable[[str], None], name: str, budget: float | None, every: float = 4.0) -> None:
        self.say, self.name, self.every = say, name, float(every)
        self.budget = None if budget is None else float(budget)
        self.began = self.last = time.perf_counter()

    def __call__(self, simulated: float, accuracy: float) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        of = f" of {self.budget:g}" if self.budget is not None else ""
        known = f", test accuracy {accuracy:.3f}" if math.isfinite(accuracy) else ""  # (not in a cost-only run)
        self.say(f"  {self.name}: {simulated:.3f}{of} simulated s{known} "
                 f"({now - self.began:.0f} s of computing so far)")


class RunTicker:
    """Progress lines for one simulated run as ``dbkit simulate`` runs it (``JobRun.on_progress``): at most
    every ``every`` real seconds, the simulated seconds and steps done, the real seconds so far and an
    estimate of the rest, from the run's budget (``steps``, or ``seconds`` simulated)."""

    def __init__(self, say: Callable[[str], None], name: str, steps: int | None, seconds: float | None,
                 every: float = 4.0) -> None:
        self.say, self.name, self.every = say, name, float(every)
        self.steps, self.seconds = steps, seconds
        self.began = self.last = time.perf_counter()

    def done(self, simulated: float, steps: int) -> float:
        """The fraction of the budget done, 0 to 1."""
        if self.seconds is not None:
            return min(1.0, max(0.0, simulated / self.seconds))
        return min(1.0, max(0.0, steps / self.steps)) if self.steps else 0.0

    def __call__(self, simulated: float, steps: int) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        spent, done = now - self.began, self.done(simulated, steps)
        rest = f", about {spent * (1 - done) / done:.0f} s to go" if done > 0 else ""
        budget = (f" of {self.seconds:g}" if self.seconds is not None else "")
        of_steps = f" of {self.steps:,}" if self.seconds is None and self.steps else ""
        self.say(f"  {self.name}: {simulated:.3f}{budget} simulated s, {steps:,}{of_steps} steps "
                 f"({spent:.0f} s of computing{rest})")
