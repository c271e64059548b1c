"""A simulated run's report does not depend on how this machine's threads interleave: the simulation run one
event per slice, with the driver's thread given time between every two (it may then look, and act, at any
event), gives the report of the usual run, field for field (``tests/sim_grid.py``'s comparison).

What used to depend on it (CI, once in a few hundred runs on a loaded machine): a ``fit`` whose driver saw
its step target reached before the job's own loop had taken the evaluation due there paused the job first,
and the report had an extra sample and fetch."""

import threading
import time

import pytest

from dbkit.config import RunConfig
from dbkit.jobs.figures import JobFigures
from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.time_driver import TimeDriver
from dbkit.sim import Cluster, simulated_run

from .sim_grid import differences, fingerprint

CASES = {
    "downpour-evaluation-at-the-target": (dict(algorithm="downpour", model="linear", replicas=3, shards=2, steps=60,
                                               eval_every=30), False),
    "downpour-cost-only": (dict(algorithm="downpour", replicas=4, shards=1, steps=24, eval_every=12), True),
    "sandblaster": (dict(algorithm="sandblaster", model="linear", replicas=3, shards=2, l2=1e-3, iterations=3,
                         steps=3, eval_every=1), False),
}


def _run(name: str) -> dict:
    settings, cost_only = CASES[name]
    return fingerprint(simulated_run(RunConfig.make(**settings), Cluster("distbelief-2012"),
                                     shape="speech-42m" if cost_only else None, cost_only=cost_only).run())


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_run_sliced_at_every_event_with_the_driver_acting_between_gives_the_same_report(name, monkeypatch):
    usual = _run(name)
    monkeypatch.setattr(Simulation, "check_every", 1)
    monkeypatch.setattr(TimeDriver, "slice_seconds", 0.0)
    monkeypatch.setattr(TimeDriver, "between_slices", 0.002)
    sliced = _run(name)
    assert differences(sliced, usual) == [], f"{name}: the report depends on the threads' interleaving"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_slow_sample_in_the_simulation_does_not_let_the_driver_pause_the_job_first(name, monkeypatch):
    """The job's own sample at the target (the monitor's, the coordinator's) made slow in this machine's time:
    a driver that polls meanwhile sees the steps reached; it must still pause the job after that sample, at
    the same instant, and take no second one."""
    usual = _run(name)
    sample = JobFigures._sample

    def slow(self, *args, **kwargs):
        if threading.current_thread().name == "dbkit-simulation":
            time.sleep(0.06)  # (longer than the driver's 50 ms poll)
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(JobFigures, "_sample", slow)
    assert differences(_run(name), usual) == [], f"{name}: the driver paused the job in the middle of its sample"
