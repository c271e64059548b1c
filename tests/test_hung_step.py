"""Issue #48, defect 5: a replica loop is held to the job's budget and liveness. A ``step()`` that never returned
held ``dbkit run downpour --seconds 8`` past 30 s (only a third Ctrl-C ended it, with no report), and a loop that
never counted its steps never reached ``--steps N`` (0 steps, 97,928 pushes at 90 s)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from dbkit.downpour.step_watch import StepWatch

HANGING = '''
import threading

from dbkit.downpour import DownpourReplica
from dbkit.downpour.replica_kinds import register_replica


@register_replica
class Hanging(DownpourReplica):
    """Replica 0 hangs in its third step for ever; the others train."""
    name = "hanging"

    def step(self):
        if self.index == 0 and self.counters.steps >= 2:
            threading.Event().wait()
        return super().step()
'''

FORGETFUL = '''
from dbkit.downpour import DownpourReplica
from dbkit.downpour.replica_kinds import register_replica


@register_replica
class Forgetful(DownpourReplica):
    """Its step leaves the step count as it found it, as a loop written anew that never calls stepped."""
    name = "forgetful"

    def step(self):
        loss = super().step()
        self.counters.steps -= 1
        return loss
'''


def _run(tmp_path, source: str, loop: str, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    path = tmp_path / f"{loop}_loop.py"
    path.write_text(source)
    report = tmp_path / "r.json"
    out = subprocess.run([sys.executable, "-m", "dbkit", "run", "downpour", "--extension", str(path), "--replica",
                          loop, "--model", "linear", "--quiet", "--report", str(report), *args],
                         capture_output=True, text=True, timeout=240)  # (a guard: a regression must not hang CI)
    return out, json.loads(report.read_text()) if report.exists() else {}


@pytest.mark.parametrize("runtime", ["dask", "in-process"])
def test_a_step_that_never_returns_fails_its_replica_and_the_job_ends_with_its_report(tmp_path, runtime):
    out, report = _run(tmp_path, HANGING, "hanging", "--seconds", "3", "--heartbeat-timeout", "2", "--runtime",
                       runtime)
    assert out.returncode == 0, out.stderr
    replicas = {r["replica"]: r for r in report["replicas"]}
    assert replicas[0]["state"] == "failed" and replicas[0]["steps"] == 2
    assert replicas[0]["error"].startswith("step() did not return within 2 s")
    assert replicas[1]["state"] == "stopped" and replicas[1]["steps"] > 10  # the other trained on
    assert report["state"] == "stopped" and "step() did not return within 2 s" in out.stdout


@pytest.mark.parametrize("runtime", ["dask", "in-process"])
def test_a_loop_that_does_not_count_its_steps_is_counted_by_the_framework(tmp_path, runtime):
    out, report = _run(tmp_path, FORGETFUL, "forgetful", "--steps", "50", "--runtime", runtime)
    assert out.returncode == 0, out.stderr
    assert report["steps"] == 50 and sum(r["steps"] for r in report["replicas"]) == 50
    assert all(r["pushes"] == r["steps"] for r in report["replicas"])  # one push a step: it did not run on


def test_a_step_watch_gives_up_on_an_overrunning_step_once_and_not_on_a_quick_one():
    failed: list[str] = []
    watch = StepWatch(lambda error: failed.append(error) or None, "t")  # type: ignore[func-returns-value]
    try:
        watch.began(10.0)
        assert watch.ended() and failed == []  # a quick step
        watch.began(0.3)
        release = threading.Event()
        release.wait(1.5)  # a step that overruns its bound (the watch looks every 0.25 s)
        deadline = time.monotonic() + 30
        while not failed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(failed) == 1 and failed[0].startswith("step() did not return within 0.3 s")
        assert not watch.ended()  # the loop must end without publishing
    finally:
        watch.close()
