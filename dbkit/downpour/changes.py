"""A change to a running Downpour job, applied to its parts: the shards' rule and rate, the replicas'
exchange rates and stragglers, how many replicas there are, and a new layout of shards and partitions
(DistBelief Sec. 3 and 4.1). A new layout stops the replicas (they push what they accumulated), moves the
parameters and Adagrad state to the new shards, and starts as many replicas again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import RunConfig
from ..telemetry import Relayout
from .fleet import Fleet
from .placement import Placement
from .recovery import JobLink, Recovery


def apply_change(changes: dict[str, Any], old: RunConfig, new: RunConfig, fleet: Fleet, placement: Placement,
                 move: Callable[[], None] | None = None, acted: float = 10.0) -> None:
    """Apply validated ``changes`` (``old`` is the job's config before them, ``new`` after); on an error
    the fleet keeps ``old`` for the replicas it launches, and the error is raised. A new layout of shards
    or partitions is ``move()`` (``relayout`` with the job's recovery; a job that has none refuses it).
    New rates and stragglers are told to every replica's control object and waited for until each replica
    has acted on them, at most ``acted`` seconds, and replicas told to leave until they have ended (0: told,
    not waited for; each acts, or ends, at its next step)."""
    fleet.use(new)  # replicas launched from now on start with the new settings
    try:
        if "lr" in changes or new.shard_lr() != old.shard_lr():
            placement.set_lr(new.shard_lr())
        if "optimizer" in changes or new.rule_settings() != old.rule_settings():
            placement.set_optimizer(new.rule())
        if new.shards != old.shards or new.downpour.partitions != old.downpour.partitions:
            if move is None:
                raise ValueError("this job cannot change its shards or partitions while it runs")
            move()
        rates = {k: v for k, v in changes.items() if k in ("n_fetch", "n_push", "lr")}
        if rates:
            fleet.steer(wait=acted, **rates)
        if "slow_replicas" in changes:
            fleet.set_slow(dict(new.slow_replicas), wait=acted)
        if (new.downpour.replica, new.replica_settings()) != (old.downpour.replica, old.replica_settings()):
            renew(fleet)
        if "replicas" in changes:
            fleet.resize(new.replicas, wait=acted > 0)
    except BaseException:
        fleet.use(old)
        raise


def renew(fleet: Fleet) -> None:
    """Replace the live replicas with new ones (each pushes what it accumulated first): a replica reads its
    loop and the loop's own settings (``dbkit.downpour.replica_kinds``) when it starts."""
    with fleet.launching:
        live = fleet.live()
        fleet.stop(live, state="relaid")
        fleet.add(len(live))


def relayout(old: RunConfig, new: RunConfig, fleet: Fleet, placement: Placement, recovery: Recovery,
             link: JobLink) -> None:
    """Stop the replicas, move parameters and Adagrad state to shards laid out as ``new`` asks, and start
    as many replicas again; if the new layout cannot be placed, the old one stays and the replicas restart
    on it."""
    with fleet.launching:
        live = fleet.live()
        fleet.stop(live, state="relaid")
        try:
            before = placement.relayout(new)
        except BaseException:
            fleet.use(old)
            fleet.add(len(live))
            raise
        recovery.new_layout()
        link.events.emit(Relayout, step=link.progress(), partitions=new.downpour.partitions, shards=new.shards,
                         shards_before=tuple(before))
        fleet.add(len(live))
