"""A coordinator written here, in a test file, runs on all three runtimes without touching ``dbkit/ps``:
every replica waits at a barrier every k steps (``Barrier`` and ``BarrierReplica``, the extension's whole text
between the two ``---`` lines, checked to be under 60 lines), against Downpour, where a slow replica falls
behind."""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import ClassVar

import pytest

import dbkit
from dbkit.downpour import DownpourReplica
from dbkit.downpour.coordinators import register_coordinator
from dbkit.downpour.replica_kinds import register_replica
from dbkit.settings import Knobs, knob


# --- the extension: a barrier coordinator and the loop that waits at it ---------------------------------------
@register_coordinator
class Barrier:
    """The steps each live replica has reached; a replica that leaves is waited for no more."""

    name: ClassVar[str] = "test-barrier"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reached: dict[str, int] = {}

    def reach(self, replica: str, step: int) -> int:
        """``replica`` has reached ``step``: the fewest steps a live replica has reached."""
        with self._lock:
            self._reached[replica] = step
            return min(self._reached.values())

    def leave(self, replica: str) -> None:
        with self._lock:
            self._reached.pop(replica, None)


@dataclass(frozen=True)
class BarrierKnobs(Knobs):
    every: int = knob(4, "int", 1, 1000, help="test barrier: k, the steps between two barriers")


@register_replica
class BarrierReplica(DownpourReplica):
    """Downpour's step, and every k steps a wait until every live replica has done as many."""

    name: ClassVar[str] = "test-barrier-every"
    coordinator_name: ClassVar[str | None] = "test-barrier"
    Knobs = BarrierKnobs
    knob: BarrierKnobs

    def step(self) -> float:
        if self.counters.steps == 0:
            self.coordinator.reach(self.label, 0)  # counted from its first step
        loss = super().step()
        done = self.counters.steps
        if done % self.knob.every == 0:
            self.wait_until(lambda: self.coordinator.reach(self.label, done) >= done)
        return loss

    def flush(self) -> None:
        super().flush()
        self.coordinator.leave(self.label)  # paused or stopped: nobody waits for it
# --- end of the extension ---------------------------------------------------------------------------------------


def test_the_extension_is_under_sixty_lines():
    text = inspect.getsource(inspect.getmodule(Barrier))
    body = text.split("# --- the extension")[1].split("# --- end of the extension")[0]
    assert len(body.strip().splitlines()) < 60


@pytest.mark.parametrize("loop", ["downpour", "test-barrier-every"])
def test_a_barrier_keeps_a_slow_replica_within_k_steps_on_every_runtime(anywhere, loop):
    k = 4
    knobs = {"every": k} if loop != "downpour" else {}
    with dbkit.DownpourSGD("linear", "digits", replicas=3, shards=2, lr=0.05, optimizer="sgd", replica=loop,
                           slow_replicas={0: 6.0}, overlap=False, **anywhere, **knobs) as job:
        job.fit(steps=240, progress=False)
        steps = [r.steps for r in job.replicas()]
    assert sum(steps) >= 240
    if loop == "downpour":  # the slow one falls behind: the reference the barrier is measured against
        assert steps[0] < min(steps[1:]) - 2 * k, steps
    else:  # at most one barrier apart, each replica's share of the cap notwithstanding
        assert max(steps) - min(steps) <= 2 * k, steps
    assert job.report()["config"]["replica_loop"]["name"] == loop


def test_a_loop_naming_an_unknown_coordinator_is_refused_before_any_replica_is_replaced():
    from dbkit.runtime import InProcessCluster

    @register_replica
    class Lonely(DownpourReplica):
        """A loop whose coordinator nobody registered."""

        name: ClassVar[str] = "test-lonely"
        coordinator_name: ClassVar[str | None] = "test-no-such-coordinator"

    with InProcessCluster(2) as machines, dbkit.DownpourSGD("linear", "digits", cluster=machines, replicas=2,
                                                               lr=0.05) as job:
        job.start()
        with pytest.raises(ValueError, match="coordinator must be one of"):
            job.set(replica="test-lonely")
        assert job.config.downpour.replica == "downpour"
        assert job.snapshot().live_replicas == 2  # nothing was replaced
