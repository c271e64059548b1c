"""Saturation where a researcher looks: the busiest shard CPU, shard link, replica link and coordinator of a
simulated run, each 0 to 1, checked against the bytes the shard's NIC carried; a saturated run still stops
cleanly with every push applied; lost replicas are said first."""

import json

import pytest

from dbkit.cli.summary import print_summary
from dbkit.config import RunConfig
from dbkit.runtime.sim.busy import SATURATED, Busy
from dbkit.sim import Cluster, load_profile, simulated_run
from dbkit.telemetry import validate_report


@pytest.fixture(scope="module")
def saturated():
    """12 replicas pushing a 42M-parameter model's gradients to one shard over 1 Gb/s links."""
    cfg = RunConfig.make(algorithm="downpour", replicas=12, shards=1, steps=48, eval_every=24)
    return simulated_run(cfg, Cluster("distbelief-2012"), shape="speech-42m", cost_only=True).run()


def test_a_saturated_run_names_the_shard_link_and_its_busy_fraction_is_the_bytes_it_carried(saturated):
    busy, sim = saturated["simulation"]["busy"], saturated["simulation"]
    assert busy["saturated"] == "shard_link" and SATURATED <= busy["shard_link"] <= 1.0
    shard = next(m for m in sim["machines"] if "shard 0" in m["roles"])
    bandwidth = load_profile("distbelief-2012").machine.bandwidth
    carried = max(shard["bytes_sent"], shard["bytes_received"]) / bandwidth / sim["virtual_seconds"]
    assert busy["shard_link"] == pytest.approx(carried, abs=1e-3)  # a message holds the NIC for bytes/bandwidth
    assert busy["shard_cpu"] < 0.5 and busy["shard_link"] > 10 * busy["shard_cpu"]


def test_a_saturated_run_stops_cleanly_with_every_push_applied(saturated):
    assert validate_report(saturated) == []
    assert {r["state"] for r in saturated["replicas"]} == {"stopped"}
    assert sum(r["pushes"] for r in saturated["replicas"]) == saturated["shards"][0]["updates"] == 48
    queue = saturated["simulation"]["shard_queues"][0]
    assert queue["served_by"]["push_fetch"] == 48 and queue["mean_service_by"]["push_fetch"] > 0


def test_the_cost_of_each_kind_of_shard_request_is_in_the_report(saturated):
    queue = saturated["simulation"]["shard_queues"][0]
    served = sum(queue["mean_service_by"][k] * n for k, n in queue["served_by"].items())
    assert served / (queue["servers"] * saturated["simulation"]["virtual_seconds"]) == pytest.approx(
        queue["busy"], abs=1e-4)
    assert queue["mean_service_by"]["push_fetch"] > queue["mean_service_by"]["fetch"]  # a push's update on top


def test_a_run_far_from_its_limits_names_nothing_saturated():
    cfg = RunConfig.make(algorithm="downpour", model="mlp", replicas=2, shards=2, steps=60, eval_every=30)
    busy = simulated_run(cfg, Cluster("distbelief-2012")).run()["simulation"]["busy"]
    assert busy["saturated"] is None and max(v for k, v in busy.items() if k != "saturated") < SATURATED


def test_the_summary_names_the_saturated_resource_and_says_lost_replicas_first(saturated):
    lines: list[str] = []
    print_summary(saturated, lines.append)
    assert lines[1].startswith("saturated: shard link (busy 0.9")
    lost = json.loads(json.dumps(saturated))
    lost["replicas"][3].update(state="lost", error="its machine died")
    lines = []
    print_summary(lost, lines.append)
    assert lines[0] == "1 of 12 replicas were lost: 3 (see the report)"
    assert Busy(shard_cpu=0.5).saturated() is None and Busy(replica_link=0.95).saturated() == "replica_link"


def test_the_heartbeat_beats_in_simulated_time(saturated):
    """The driver's pings go out every heartbeat period of *virtual* time (about every 1 to 1.5 s here), so a
    run's results do not depend on how fast this machine simulates it; in this machine's time, the run of
    about a second would have sent a ping or two in its 80 simulated seconds."""
    pings = saturated["simulation"]["shard_queues"][0]["served_by"]["ping"]
    seconds = saturated["simulation"]["virtual_seconds"]
    assert seconds / 1.5 - 2 <= pings <= seconds + 2
