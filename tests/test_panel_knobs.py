"""Issue #24: the panel shows the chosen update rule's and replica loop's own settings, and moving one steers
the running job: a rule's knob reaches the shards at once, a loop's renews the replicas with it."""

import threading
import time

import pytest

import dbkit
from dbkit.runtime import InProcessCluster
from dbkit.telemetry import ReplicaEvent
from dbkit.widgets import Panel


def until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_panel_steers_diloco_knobs_on_a_running_job():
    with InProcessCluster(2) as m:
        job = dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=2, replica="diloco", optimizer="nesterov",
                                lr=0.003, outer_lr=0.35, inner_steps=4, seconds=120)
        panel = Panel(job)
        try:
            assert {"replica", "momentum", "inner_steps", "outer_lr", "inner_optimizer",
                    "weight_decay"} <= set(panel.controls)
            assert panel.controls["inner_steps"].value == 4 and panel.controls["momentum"].value == 0.9
            assert list(panel.controls["replica"].options) == list(dbkit.downpour.replica_kinds.registered_replicas())
            panel.buttons["start"].click()
            panel.wait_idle()
            until(lambda: job.state == "running" and job.snapshot().step > 40)

            panel.controls["momentum"].value = 0.5  # a rule's knob: the shards take the new rule at once
            panel.wait_idle()
            assert job.config.rule().settings() == {"momentum": 0.5}
            assert [s.rule_settings for s in job.shards()] == [{"momentum": 0.5}] * len(job.shards())

            seq = len(job.events) - 1  # ``since`` gives the events after this one
            panel.controls["inner_steps"].value = 10  # a loop's knob: the replicas are renewed with it
            panel.wait_idle()
            assert job.config.knob("inner_steps") == 10

            def relaid():  # the job's monitor writes each replica's end to the stream as it notices it
                return [e for e in job.events.since(seq) if isinstance(e, ReplicaEvent) and e.what == "relaid"]

            until(lambda: len(relaid()) >= 2, 10)
            assert len(relaid()) == 2 and job.snapshot().live_replicas == 2
            new = [r.replica for r in job.replicas() if r.live]
            until(lambda: all(r.steps >= 40 for r in job.replicas() if r.replica in new))
            for r in job.replicas():
                if r.replica in new:  # each push is a round of 10 steps now
                    assert r.steps // 10 <= r.pushes <= r.steps // 10 + 1
            with pytest.raises(ValueError, match="inner_steps must be a whole number"):
                job.set(inner_steps=0)  # out of range: refused, and nothing changes
            assert job.config.knob("inner_steps") == 10 and job.snapshot().live_replicas == 2
        finally:
            panel.close()
            job.stop()
    assert not [t for t in threading.enumerate() if t.name.startswith("dbkit-panel")]



def shown(panel):
    return {s for s, c in panel.controls.items() if c.layout.display != "none"}


def test_switching_the_rule_or_the_loop_on_the_panel_brings_up_its_own_knobs():
    with InProcessCluster(2) as m:
        job = dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=2, optimizer="adagrad", lr=0.05, seconds=120)
        panel = Panel(job)
        try:
            own = shown(panel) - {"replicas", "partitions", "shards", "n_fetch", "n_push", "lr", "optimizer",
                                  "replica", "warm_start_steps"}
            assert own == {"eps", "initial_accumulator"}  # Adagrad's, and Downpour's loop has none
            panel.buttons["start"].click()
            panel.wait_idle()
            until(lambda: job.state == "running")

            panel.controls["optimizer"].value = "nesterov"
            panel.wait_idle()
            until(lambda: "momentum" in shown(panel) and "eps" not in shown(panel))
            assert panel.controls["momentum"].value == job.config.knob("momentum") == 0.9  # Nesterov's default
            panel.controls["momentum"].value = 0.6
            panel.wait_idle()
            assert [s.rule_settings for s in job.shards()] == [{"momentum": 0.6}] * len(job.shards())

            panel.controls["replica"].value = "ssp"  # the loop: its knob comes up, and steers the new replicas
            panel.wait_idle()
            until(lambda: "max_staleness" in shown(panel))
            panel.controls["max_staleness"].value = 2
            panel.wait_idle()
            assert job.config.replica_settings() == {"max_staleness": 2} and job.snapshot().live_replicas == 2
        finally:
            panel.close()
            job.stop()


def test_an_optional_knob_left_unset_is_kept_and_its_control_disabled():
    with InProcessCluster(2) as m:
        job = dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=2, replica="ssp", max_staleness=None)
        assert job.config.replica_settings() == {"max_staleness": None}  # unbounded, not the default of 3
        panel = Panel(job)
        try:
            assert "max_staleness" in shown(panel) and panel.controls["max_staleness"].disabled
        finally:
            panel.close()
            job.stop()
