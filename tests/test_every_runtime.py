"""One job, one test body, three runtimes: a ``DownpourSGD`` on the shared LocalCluster, on in-process
workers and on a simulated cluster is the same class, and goes through the same lifecycle (start, set,
pause, resume, lose a replica, stop, report) with the same outcomes. Only the clock differs: seconds on
real machines, simulated seconds on a simulated one (its report says so, with its profile)."""

import time

import dbkit
from dbkit.telemetry import validate_report


def test_a_jobs_lifecycle_is_the_same_on_every_runtime(anywhere):
    job = dbkit.DownpourSGD("linear", "digits", replicas=3, shards=2, lr=0.05, optimizer="sgd", eval_every=20,
                            **anywhere)
    assert isinstance(job, dbkit.DownpourSGD)
    simulated = "cluster" in anywhere and job.snapshot().simulation is not None
    with job:
        job.start()
        job.wait(steps=30, progress=False)
        assert job.state == "running" and job.snapshot().step >= 30

        job.set(lr=0.02, replicas=4)  # a setting of the shards and one of the fleet, at one instant
        assert job.config.lr == 0.02 and job.snapshot().live_replicas == 4

        job.pause()
        assert job.state == "paused"
        held = job.snapshot().step
        time.sleep(0.5)  # a paused job takes no more steps (a replica may end the one under way)
        assert job.snapshot().step <= held + 4

        job.resume()
        job.wait(steps=30, progress=False)
        lost = job.lose_replica()
        job.wait(steps=30, progress=False)
        states = {r.replica: r.state for r in job.replicas()}
        assert states[lost] == "lost" and sum(s == "running" for s in states.values()) == 3

        job.stop()
        report = job.report()
    assert validate_report(report) == []
    assert report["state"] == "stopped" and report["steps"] >= 90 and report["config"]["lr"] == 0.02
    assert report.get("simulated", False) is simulated
    changes = {e["setting"]: e for e in report["events"] if e["type"] == "Change" and not e.get("superseded")}
    assert changes["lr"]["new"] == 0.02 and changes["replicas"]["new"] == 4
    lost_events = [e for e in report["events"] if e["type"] == "ReplicaEvent" and e["what"] == "lost"]
    assert [e["replica"] for e in lost_events] == [lost]
    assert report["final"]["test_accuracy"] > 0.5  # it trained (one class in ten would be 0.1)
