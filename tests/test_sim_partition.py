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
    assert split.sim.now > 0 and report["simulated"] is True
