"""A partitioned replica in virtual time against the unpartitioned network (DistBelief Sec. 3)."""

import numpy as np
import pytest

from dbkit import data
from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.mark.parametrize("model,k", [("mlp", 2), ("image-local", 3)])
def test_a_partitioned_replica_trains_as_the_whole_network_and_sends_only_what_connectivity_needs(digits, model, k):
    # Exchanges that wait (no overlap): one replica's trajectory is then the same whatever the timing.
    base = dict(algorithm="downpour", model=model, dataset="digits", replicas=1, optimizer="sgd", lr=0.05, steps=40,
                eval_every=40, overlap=False)
    whole = simulated_run(RunConfig.make(**base, shards=k), Cluster("here"))
    split = simulated_run(RunConfig.make(**base, shards=k, partitions=k), Cluster("here"))
    whole.run()
    report = split.run()
    np.testing.assert_allclose(split.parameters(), whole.parameters(), atol=1e-6)
    b = report["bytes"]
    assert b["between_partitions"] > 0 and b["between_partitions"] == b["between_partitions_min"]
    assert report["layout"]["partitions"] == k
    assert split.virtual_seconds > 0 and report["simulated"] is True


def test_partitioned_replicas_are_placed_resized_and_lost_by_the_jobs_own_drivers(digits):
    """A simulated job's partitioned replicas go through the Downpour job's ``Fleet`` and ``PartitionPlacement``
    (each partition a real ``DownpourPartition`` on a machine of its own on this profile): new ones come with
    machines of their own, a lost one's partitions are let go, and bytes between partitions stay the minimum."""
    import dbkit
    from dbkit.telemetry import ReplicaEvent

    with dbkit.DownpourSGD("mlp", digits, cluster=Cluster(profile="distbelief-2012"), replicas=2, shards=4,
                           partitions=2, lr=0.05, eval_every=100) as d:
        d.fit(steps=100, progress=False)
        d.set(replicas=4)
        d.fit(steps=200, progress=False)
        live = [r for r in d.replicas() if r.live]
        workers = [p.worker for r in live for p in r.partitions]
        lost = d.lose_replica(3)
        d.fit(steps=100, progress=False)
        after = {r.replica: r for r in d.replicas()}
        d.stop()
        report = d.report()
    assert len(live) == 4 and all(r.steps > 0 for r in live)
    assert len(workers) == 8 and len(set(workers)) == 8  # two partitions a replica, each on its own machine
    assert lost == 3 and after[3].state == "lost" and sum(r.live for r in after.values()) == 3
    assert any(isinstance(e, ReplicaEvent) and e.replica == 3 and e.what == "lost" for e in d.events)
    b = report["bytes"]
    assert report["layout"]["partitions"] == 2 and b["between_partitions"] == b["between_partitions_min"] > 0
