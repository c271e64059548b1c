"""The life of one Downpour replica: step as its settings say until told to stop.

The same loop drives a whole replica (``DownpourReplica``) and a partitioned
one (``PartitionedDownpourReplica``). It reads the replica's settings before
every step (rates, learning rate, pause, a step cap, stop), so steering costs
nothing per step and takes effect from the next one, and it publishes the
replica's figures as they change. On Dask, the job (``dbkit.downpour.job``) runs it inside a
long-running task with settings read from, and figures written to, a control
object on the same worker; in a test it runs in process.
"""

from __future__ import annotations

from collections.abc import Callable

from ..runtime.clock import REAL_TIME, Clock
from ..training.figures import ReplicaFigures, ReplicaSettings
from .step_watch import StepWatch


def run_replica_loop(replica, settings: Callable[[], ReplicaSettings], publish: Callable[[ReplicaFigures], None],
                     worker: str = "local", poll: float | None = None, publish_every: float | None = None,
                     clock: Clock = REAL_TIME) -> ReplicaFigures:
    """Step ``replica`` until its settings say stop, or it diverges or fails; returns its final figures.

    A paused replica (or one at its step cap) first pushes what it has
    accumulated. A replica that diverges (``replica.diverged``: only
    non-finite gradients for a while) ends as ``diverged``; one that raises
    ends as ``failed`` with the error: neither stops the other replicas. One
    told to ``crash`` ends as ``lost`` without pushing what it accumulated;
    one told it is ``slow`` sleeps after each step for (slow - 1) times the step (a replica with a
    ``lag(seconds)`` method spends that time where it chooses: a backup-sync replica, computing).
    It waits and times its steps by ``clock`` (its runtime's: virtual seconds on
    a simulated cluster). Paused, it looks at its settings every ``poll`` seconds,
    or sooner where the clock knows of a message for it; running, it publishes
    its figures every ``publish_every`` (defaults: the clock's).
    """
    poll = clock.poll if poll is None else poll
    lag = getattr(replica, "lag", clock.sleep)  # a straggler's extra time: a loop may spend it where it computes
    publish_every = clock.publish_every if publish_every is None else publish_every
    applied = settings()
    state, last = "running", 0.0

    def figures(state: str, **more) -> ReplicaFigures:
        return replica.figures().but(worker=worker, state=state, epoch=applied.epoch, slow=applied.slow, **more)

    watch = None
    if clock is REAL_TIME:  # a step held to the job's bound (virtual time has no hung steps to outlast)
        def fail(error: str) -> ReplicaFigures:
            final = figures("failed", failures=1, error=error)
            publish(final)
            return final

        watch = StepWatch(fail, str(getattr(replica, "index", worker)))
    try:
        while True:
            s = settings()
            if s.crash:  # as if its machine died: what it accumulated is never pushed
                applied = s
                final = figures("lost", failures=1, error="its task was killed (lose_replica): the gradient it "
                                                          "had accumulated is lost; training goes on without it")
                publish(final)
                return final
            if s.stop:
                break
            acted = s is not applied
            if acted:
                if (s.n_fetch, s.n_push, s.lr) != (applied.n_fetch, applied.n_push, applied.lr):
                    replica.configure(s.n_fetch, s.n_push, s.lr)
                applied = s
            if s.paused or replica.counters.steps >= s.max_steps:
                if state != "paused" or acted:
                    if state != "paused":
                        replica.flush()
                    state = "paused"
                    publish(figures(state))
                clock.wait(poll)
                continue
            began = clock.now()
            counted = (replica.counters.steps, replica.counters.nonfinite)
            if watch is not None:
                watch.began(s.step_timeout)
            loss = replica.step()
            if watch is not None and not watch.ended():  # given up on while it stepped: failed, published
                return watch.abandoned or figures("failed")
            if (replica.counters.steps, replica.counters.nonfinite) == counted:  # a loop that did not count
                replica.counters.stepped(float(loss) if isinstance(loss, (int, float)) else float("nan"), 0)
            if s.slow > 1:
                lag((s.slow - 1) * (clock.now() - began))
            if replica.diverged:
                c = replica.counters
                final = figures("diverged", error=f"{c.nonfinite_in_a_row} non-finite gradients in a row "
                                                  f"(lr={replica.lr})")
                publish(final)
                return final
            now = clock.now()
            if state != "running" or acted or now - last >= publish_every:
                state, last = "running", now
                publish(figures(state))
        replica.flush()
        final = figures("stopped")
    except Exception as e:  # noqa: BLE001 - a replica's death must not stop training
        final = figures("failed", failures=1, error=f"{type(e).__name__}: {e}")
    finally:
        if watch is not None:
            watch.close()
    publish(final)
    return final
