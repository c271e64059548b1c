"""What a running Downpour job's two background threads do at each tick: watch the replicas, and beat.

The monitor thread polls the replicas, notes who started or ended, warm-starts the others, brings lost
shards back (``Recovery``), ends the job when no replica is left, and samples and evaluates when due. The
heartbeat thread pings the shards, the partitions and the replicas' control actors; a machine silent for
``heartbeat_timeout`` is dropped from the scheduler, so that calls waiting on it fail now. Both are
composed from the job's parts (``Fleet``, ``Placement``, ``Monitor``, ``Recovery``); what they tell the job
goes through ``WatchLink``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..config import RunConfig
from ..jobs import Monitor
from ..jobs.heartbeat import drop_hung, note_late
from ..runtime.protocol import Runtime
from ..telemetry import EventStream, ReplicaEvent
from .fleet import Fleet
from .placement import Placement
from .recovery import Recovery


@dataclass(frozen=True)
class WatchLink:
    """What the watch asks of its job and tells it."""

    events: EventStream
    config: Callable[[], RunConfig]  # the job's settings now (set() changes them)
    ended: Callable[[], bool]  # the job has finished, failed or diverged
    stopped: Callable[[], bool]  # stop() was called
    connection_lost: Callable[[], bool]  # the scheduler is gone (the job has been told)
    sample: Callable[[bool], object]  # take a sample (and evaluate, if True)
    diverged: Callable[[str], None]
    failed: Callable[[str, BaseException], None]
    sample_every: float


class Watch:
    """One Downpour job's monitor tick (``tick``) and heartbeat (``pulse``)."""

    def __init__(self, fleet: Fleet, placement: Placement, monitor: Monitor, recovery: Recovery, cluster: Runtime,
                 link: WatchLink) -> None:
        self.fleet, self.placement, self.monitor, self.recovery = fleet, placement, monitor, recovery
        self.cluster, self.link = cluster, link

    def tick(self) -> float | None:
        """One tick of the monitor thread: poll the replicas, note who started or ended, warm start,
        end the job if every replica has ended, sample and evaluate when due. ``None`` ends the thread;
        otherwise the seconds until the next tick."""
        fleet, placement, monitor, link = self.fleet, self.placement, self.monitor, self.link
        if link.stopped():
            return None
        now = link.events.now()
        if link.connection_lost():
            return None
        if fleet.launching.acquire(blocking=False):  # a change in progress settles its replicas itself
            try:
                fleet.poll()
                alive = set(self.cluster.workers()) if monitor.worker_check_due(now) else None
                if placement.partitions > 1 and alive is not None:
                    fleet.book.check_partitions(alive)
                fleet.release_ended_partitions()
                self.note_transitions()
                if not link.ended():
                    self.recovery.tick(placement, fleet, link.config(), now, alive)
                fleet.warm_start(link.config().downpour.warm_start_steps)
                self._end_if_no_replica_is_left()
            finally:
                fleet.launching.release()
        else:
            fleet.poll(settle=False)
        steps = fleet.total_steps()
        evaluate, sample = monitor.due(steps, now, link.config().eval_every, link.sample_every)
        if sample:
            link.sample(evaluate)
        return monitor.interval(link.events.now(), steps, len(fleet.live()))

    def pulse(self) -> float | None:
        """One beat of the heartbeat thread: ping the shards; a worker whose shards stopped answering
        (SIGSTOP, a wedged machine) is dropped from the scheduler at once, so that calls waiting on it fail
        now, and the monitor brings its shards back from the checkpoint as for a dead machine, instead of
        when the machine wakes, or never. Its own thread: the monitor may be waiting on that very machine."""
        if self.link.stopped():
            return None
        if self.link.ended() or self.cluster.lost(0) is not None:
            return 0.5
        controls = {f"control@{w}": (ctl, w) for w, ctl in self.fleet.controls.items()}
        hung = self.placement.beat(controls)
        if hung:
            drop_hung(self.cluster, self.link.events, hung, self.link.config().heartbeat_timeout)
        note_late(self.link.events, self.placement.answered_late())
        return self.placement.heartbeat.period / 2

    def note_transitions(self) -> None:
        """A ``ReplicaEvent`` for each replica that started or ended since the last call (the monitor
        thread and a change both call it: the fleet's lock makes each transition noted once)."""
        fleet = self.fleet
        with fleet.launching:
            replacing = {new: old for old, new in fleet.replaced.items()}
            for index, what, f in self.monitor.transitions(fleet.figures()):
                reason = f.error
                if what == "started" and index in fleet.added:
                    what = "added"
                elif what == "started" and index in replacing:
                    what, reason = "restarted", f"replaces replica {replacing[index]}"
                self.link.events.emit(ReplicaEvent, replica=index, what=what, worker=f.worker, reason=reason)

    def _end_if_no_replica_is_left(self) -> None:
        ended = self.fleet.all_ended()
        if self.link.ended() or not ended:
            return
        lost = self.placement.lost_shards()
        if lost is not None and self.recovery.restore_lost(self.cluster, self.placement, self.fleet,
                                                           self.link.config(), self.link.events.now()):
            return
        if self.link.ended():
            return
        self.link.sample(False)
        if any(f.state == "diverged" for f in ended):
            self.link.diverged(f"every replica diverged ({ended[0].error})")
        elif lost is not None:
            self.link.failed("the parameter server", RuntimeError(lost))
        else:
            self.link.failed("the replicas", RuntimeError("every replica has failed or been lost: " + "; ".join(
                f"replica {f.replica}: {f.error}" for f in ended)))
