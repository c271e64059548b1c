"""Stale Synchronous Parallel: a replica more than s steps ahead of the slowest live one waits.

Ho, Cipar, Cui, Kim, Lee, Gibbons, Gibson, Ganger and Xing, "More Effective
Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013:
each worker has a clock, the steps it has finished; one whose clock is more
than ``s`` ahead of the slowest worker's waits for it. ``s = 0`` is
synchronous (every replica computes step t on the parameters after everyone's
step t - 1); unbounded (``max_staleness=None`` in a ``RunConfig``, or any s as
large as the run) is Downpour (DistBelief Sec. 4.1),
where a fast replica never waits and a slow one's gradients grow stale.

The clocks live on shard 0 (``dbkit.ps.replica_clocks``): a replica tells it
each finished step and learns the slowest clock in the same call. SSP's read
guarantee holds too: step ``c`` computes on parameters fetched after every
replica had finished ``c - s`` steps (a push's fetch that came earlier is
fetched again). A replica
counts from its first call (when it starts); one that pauses, stops or is lost
leaves, and nobody waits for it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..downpour.replica import DownpourReplica
from ..downpour.replica_kinds import register_replica
from ..settings import Setting, check


@register_replica
class SSPReplica(DownpourReplica):
    """Stale Synchronous Parallel (Ho et al. 2013): a replica more than s steps ahead of the slowest waits."""

    name: ClassVar[str] = "ssp"
    knobs: ClassVar[tuple[Setting, ...]] = (
        Setting("max_staleness", "int", 0, 1_000_000, optional=True,
                help="SSP: s, the steps a replica may run ahead of the slowest (0: synchronous; None: Downpour)"),)
    max_staleness: int | None = 3

    def __init__(self, *args: Any, max_staleness: int | None = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_staleness = check("max_staleness", max_staleness)
        self.waits = 0  # looks at the slowest clock that found this replica too far ahead (it then waited)
        self.slowest = 0
        self.params_slowest = -1  # the slowest clock known when the parameters it computes on were fetched
        self.joined = False

    def took_params(self, params) -> None:
        super().took_params(params)
        self.params_slowest = self.slowest

    def step(self) -> float:
        """Wait while more than ``max_staleness`` steps ahead of the slowest, then a Downpour step."""
        s = self.max_staleness
        if s is None:
            return super().step()
        done = self.counters.steps
        if not self.joined:
            self.slowest, self.joined = self.server.tick(done), True
        if done - self.slowest > s:  # too far ahead, as last told: wait, and ask again until caught up
            self.waits += 1
            self.wait_until(lambda: self.caught_up(done, s), look_first=False)
        if self.params_slowest < done - s:  # fetched before every replica had finished step done - s:
            self.schedule.fetch_afresh()  # the step must see their pushes (SSP's read guarantee)
        loss = super().step()
        self.slowest = self.server.tick(self.counters.steps)
        return loss

    def caught_up(self, done: int, s: int) -> bool:
        """Ask shard 0 for the slowest clock again: True once ``done`` steps are at most ``s`` ahead of it."""
        self.slowest = self.server.tick(done)
        if done - self.slowest > s:
            self.waits += 1
            return False
        return True

    def flush(self) -> None:
        """Push what was accumulated, and leave: nobody waits for a paused or stopped replica."""
        super().flush()
        if self.max_staleness is not None and self.joined:
            self.server.leave()
            self.joined = False
