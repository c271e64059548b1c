"""Stale Synchronous Parallel: a replica more than s steps ahead of the slowest live one waits.

Ho, Cipar, Cui, Kim, Lee, Gibbons, Gibson, Ganger and Xing, "More Effective
Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013,
Sec. 2: each worker has a clock, the steps it has finished; one whose clock is
more than ``s`` ahead of the slowest worker's waits for it. A worker computing
step ``c`` reads parameters that hold every update of steps ``0 .. c-s-1``
(the guarantee) and none of steps ``c+s`` and later (the window
``[c-s, c+s-1]`` in which updates may or may not be seen). So ``s = 0`` is
bulk synchronous: step ``c`` computes on exactly the parameters after everyone's
step ``c - 1``, as synchronous SGD does. Unbounded (``max_staleness=None`` in a
``RunConfig``, or any s as large as the run) is Downpour (DistBelief Sec. 4.1),
where a fast replica never waits and a slow one's gradients grow stale.

The clocks live in a coordinator beside shard 0 (``dbkit.after.replica_clocks``). Each step a replica

1. waits until it is at most ``s`` steps ahead of the slowest (``tick``);
2. fetches afresh if its parameters were fetched before every replica had
   finished step ``c - s - 1``, and says it has read for step ``c`` (``began``);
3. computes, and before it pushes step ``c`` waits until every replica has read
   for step ``c - s`` at least, so that no read for an earlier step sees it;
4. waits for the push to land everywhere, and ticks.

Its fetches and pushes are therefore waited for (no overlap). A replica counts
from its first call (``join``); one that pauses, stops or is lost leaves, and
nobody waits for it. The bounds cover pushed gradients: with ``n_push > 1`` a
replica's latest unpushed steps are on it, not on the shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..downpour.replica import DownpourReplica
from ..downpour.replica_kinds import register_replica
from ..settings import Knobs, knob


@dataclass(frozen=True)
class SSPKnobs(Knobs):
    max_staleness: int | None = knob(
        3, "int", 0, 1_000_000, optional=True,
        help="SSP: s, the steps a replica may run ahead of the slowest (0: synchronous; None: Downpour)")


@register_replica
class SSPReplica(DownpourReplica):
    """Stale Synchronous Parallel (Ho et al. 2013): a replica more than s steps ahead of the slowest waits."""

    name: ClassVar[str] = "ssp"
    coordinator_name: ClassVar[str | None] = "replica-clocks"
    Knobs = SSPKnobs
    knob: SSPKnobs

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits = 0  # looks at shard 0 that found this replica had to wait (it then looked again)
        self.slowest = 0  # the slowest live replica's clock, as last told
        self.earliest_read = -1  # the earliest step a live replica has read for, as last told
        self.params_slowest = -1  # the slowest clock known when the parameters it computes on were fetched
        self.stepping = 0  # the step under way (counted from 0)
        self.joined = False

    def may_overlap(self) -> bool:
        """The bounds need each fetch and push done when the clocks say so: no overlap under a finite s."""
        return self.knob.max_staleness is None

    def join(self) -> None:
        """Be counted among the live replicas from now on (the first step does it; a test may do it first, so
        that all start together)."""
        if not self.joined:
            self.slowest, self.joined = self.coordinator.tick(self.label, self.counters.steps), True

    def took_params(self, params) -> None:
        super().took_params(params)
        self.params_slowest = self.slowest

    def step(self) -> float:
        """One step within the window of ``max_staleness`` (its steps 1 to 4 above): Downpour's step, with
        fetches and pushes waited for, between the waits."""
        s = self.knob.max_staleness
        if s is None:
            return super().step()
        c = self.stepping = self.counters.steps
        self.join()
        if c - self.slowest > s:  # 1. too far ahead, as last told: wait, and ask again until caught up
            self.waits += 1
            self.wait_until(lambda: self.caught_up(c, s), look_first=False)
        if self.params_slowest < c - s:  # 2. fetched before every replica had finished step c - s - 1
            self.schedule.fetch_afresh()
        loss = super().step()  # 3. and 4. (without overlap: the push has landed on return)
        self.slowest = self.coordinator.tick(self.label, self.counters.steps)
        return loss

    def about_to_compute(self) -> None:
        """2. The parameters for step ``stepping`` are in place: tell shard 0."""
        if self.knob.max_staleness is not None:
            self.earliest_read = self.coordinator.began(self.label, self.stepping)

    def about_to_push(self) -> None:
        """3. A replica still to read for a step before ``stepping - s`` must not see this push: wait."""
        s, c = self.knob.max_staleness, self.stepping
        if s is not None and self.earliest_read < c - s:
            self.waits += 1
            self.wait_until(lambda: self.read_by_all(c, c - s), look_first=False)

    def caught_up(self, done: int, s: int) -> bool:
        """Ask shard 0 for the slowest clock again: True once ``done`` steps are at most ``s`` ahead of it."""
        self.slowest = self.coordinator.tick(self.label, done)
        if done - self.slowest > s:
            self.waits += 1
            return False
        return True

    def read_by_all(self, mine: int, step: int) -> bool:
        """Ask shard 0 again (this replica computes step ``mine``): True once every live replica has read for
        ``step`` or a later step."""
        self.earliest_read = self.coordinator.began(self.label, mine)
        if self.earliest_read < step:
            self.waits += 1
            return False
        return True

    def flush(self) -> None:
        """Push what was accumulated, and leave: nobody waits for a paused or stopped replica."""
        super().flush()
        if self.knob.max_staleness is not None and self.joined:
            self.coordinator.leave(self.label)
            self.joined = False
