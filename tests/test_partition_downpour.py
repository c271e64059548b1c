"""Model partitioning inside Downpour (DistBelief Sec. 3 and 4.1), on a real LocalCluster and on workers in
process (``InProcessCluster``): the same checks on both runtimes.

References: plain synchronous SGD (one replica of two partitions), the
connectivity's minimum traffic, and the parameters and Adagrad accumulators
gathered before a re-partitioning.
"""

import time

import numpy as np
import pytest

from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.downpour import DownpourSGD
from dbkit.downpour.exchange import Schedule
from dbkit.partition import aligned_layout, ownership
from dbkit.ps import balanced_layout
from dbkit.runtime import InProcessCluster
from dbkit.sync_sgd import SGDTrainer
from dbkit.telemetry import Relayout, ReplicaEvent, validate_report


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.fixture(scope="module")
def image_net(digits):
    return nn.build("image-local", digits.n_features, digits.n_classes, image_shape=digits.image_shape)


# ---- the layout (numpy) ----------------------------------------------------------------------
@pytest.mark.parametrize("k,shards", [(1, 1), (1, 3), (2, 2), (2, 5), (3, 4), (4, 4)])
def test_every_shard_holds_one_partitions_parameters(image_net, k, shards):
    p = ownership(image_net, k)
    a = aligned_layout(p, shards)
    owner = p.param_owner
    assert a.layout.n_shards == shards and sorted(a.order) == list(range(image_net.size))
    for s, (lo, hi) in enumerate(a.layout.ranges):
        assert set(owner[a.order[lo:hi]]) == {a.owner_of_shard(s)}  # one partition per shard
    for j in range(k):
        lo, hi = a.blocks[j]
        np.testing.assert_array_equal(a.order[lo:hi], p.param_indices(j))  # the partition's own order
        assert a.partition_layout(j).size == p.param_indices(j).size
    x = np.random.default_rng(0).normal(size=image_net.size).astype(np.float32)
    np.testing.assert_array_equal(a.from_server(a.to_server(x)), x)
    if k == 1:
        assert a.layout == balanced_layout(image_net.size, shards) and (a.order == np.arange(image_net.size)).all()


def test_fewer_shards_than_partitions_is_refused(image_net):
    with pytest.raises(ValueError, match="shards must be at least partitions"):
        aligned_layout(ownership(image_net, 3), 2)


def test_schedule_follows_n_fetch_and_n_push():
    s = Schedule(n_fetch=3, n_push=2)
    seen = []
    for _ in range(6):
        p = s.next_step()
        seen.append((p.fetch, p.local, p.push, p.push_fetch))
        s.done(p)
    # fetch at steps 1 and 4; step 6's push (every 2) coincides with a due fetch and brings it back
    assert [f for f, *_ in seen] == [True, False, False, True, False, False]
    assert [p for _, _, p, _ in seen] == [False, True, False, True, False, True]
    assert [loc for _, loc, _, _ in seen] == [True, True, False, True, True, False]
    assert [pf for *_, pf in seen] == [False, False, False, False, False, True]


# ---- on the cluster, and in process ----------------------------------------------------------
@pytest.fixture
def machines():
    with InProcessCluster(workers=2) as m:
        yield m


def _threads_here() -> dict[str, list[str]]:
    return {"here": _partition_threads()}


@pytest.mark.parametrize("transport", ["socket", "actor"])
def test_one_replica_of_two_partitions_follows_sync_sgd(digits, image_net, local_cluster, transport):
    report = follows_sync_sgd(digits, image_net, dict(client=local_cluster.client), transport)
    # over the wire by default; --transport actor keeps an actor call per slice and per partition
    assert report["layout"]["boundary_exchange"] == {"socket": "wire", "actor": "actor"}[transport]


def test_one_replica_of_two_partitions_in_process_follows_sync_sgd(digits, image_net, machines):
    report = follows_sync_sgd(digits, image_net, dict(cluster=machines))
    assert report["layout"]["boundary_exchange"] == "wire"  # in memory: one process


def test_two_replicas_of_two_partitions_train_digits_each_partition_with_its_own_shards(
        digits, image_net, local_cluster):
    train_with_own_shards(digits, image_net, dict(client=local_cluster.client),
                          lambda: local_cluster.client.run(_partition_threads))


def test_two_replicas_of_two_partitions_in_process_train_each_partition_with_its_own_shards(
        digits, image_net, machines):
    train_with_own_shards(digits, image_net, dict(cluster=machines), _threads_here)


def test_repartitioning_keeps_parameters_adagrad_state_and_the_loss(digits, image_net, local_cluster):
    repartition(digits, image_net, dict(client=local_cluster.client))


def test_repartitioning_in_process_keeps_parameters_adagrad_state_and_the_loss(digits, image_net, machines):
    repartition(digits, image_net, dict(cluster=machines))


def follows_sync_sgd(digits, image_net, where, transport="socket"):
    cfg = RunConfig.make(algorithm="downpour", steps=40, lr=0.05, optimizer="sgd", replicas=1, shards=2, partitions=2,
                         overlap=False, transport=transport)  # exact: each step waits for its fetch, as sync SGD does
    base = SGDTrainer(image_net, digits, lr=0.05)
    for _ in range(40):
        base.step()
    with DownpourSGD(image_net, digits, config=cfg, **where) as d:
        d.fit(steps=40, progress=False)
        params = d.parameters()
        report = d.report()
    start = image_net.init_params(cfg.seed)
    moved = np.abs(base.params - start).max()
    assert moved > 1e-2  # training happened
    np.testing.assert_allclose(params, base.params, atol=1e-5 * max(1.0, moved))
    assert report["bytes"]["between_partitions"] == report["bytes"]["between_partitions_min"] > 0
    return report


def train_with_own_shards(digits, image_net, where, partition_threads):
    with DownpourSGD(image_net, digits, replicas=2, shards=3, partitions=2, optimizer="adagrad", lr=0.05,
                     **where) as d:
        d.fit(steps=500, progress=False)
        report = d.report()
        shards_of = d.layout.shards_of
    assert validate_report(report) == []
    assert report["final"]["test_accuracy"] >= 0.9
    assert report["layout"]["partitions"] == 2 and report["layout"]["shards_of_partition"] == [[0, 1], [2]]
    for s, shard in enumerate(report["shards"]):
        owner = next(j for j, ids in enumerate(shards_of) if s in ids)
        assert shard["pushers"], f"nobody pushed to shard {s}"
        assert set(shard["pushers"]) <= {f"replica{i}/partition{owner}" for i in (0, 1)}, shard["pushers"]
        assert shard["updates"] == sum(shard["pushers"].values())  # every accepted push is named
    for r in report["replicas"]:
        assert [p["shards"] for p in r["partitions"]] == [list(ids) for ids in shards_of]
        assert all(p["pushes"] == r["pushes"] > 0 for p in r["partitions"])
    b = report["bytes"]
    assert b["between_partitions"] == b["between_partitions_min"] > 0
    deadline = time.time() + 10  # stopped: the partitions' arithmetic threads end with their actors
    while (left := partition_threads()) and any(left.values()) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(left.values()), left


def _partition_threads(dask_worker=None):
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("dbkit-partition")]


def repartition(digits, image_net, where):
    with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=1, optimizer="adagrad", lr=0.05,
                     eval_every=20, **where) as d:
        d.fit(steps=150, progress=False)
        initial = d.history[0]["train_loss"]
        params, acc = d.parameter_state()
        before = d.evaluate().full_batch_loss
        assert acc is not None and before < 0.5 * initial
        d.set(partitions=2)
        after_params, after_acc = d.parameter_state()
        np.testing.assert_array_equal(after_params, params)
        np.testing.assert_array_equal(after_acc, acc)
        assert d.evaluate().full_batch_loss == pytest.approx(before, rel=1e-6)
        n = len(d.history)
        d.fit(steps=150, progress=False)
        later = [h["train_loss"] for h in d.history[n:]]
        report = d.report()
    assert max(later) < 0.5 * initial and min(later) < before * 1.2  # continuous: no jump back
    assert report["layout"]["partitions"] == 2 and len(report["layout"]["relayouts"]) == 1
    states = [r["state"] for r in report["replicas"]]
    assert states.count("relaid") == 2 and len(states) == 4
    old = report["layout"]["relayouts"][0]["shards_before"]  # the old shards' figures are kept
    relaid_pushes = sum(r["pushes"] for r in report["replicas"] if r["state"] == "relaid")
    assert len(old) == 2 and sum(s["version"] + s["rejected"] for s in old) == 2 * relaid_pushes > 0
    assert report["bytes"]["between_partitions"] > 0
    assert all(r.get("partitions") for r in report["replicas"][2:])


def test_bad_partitions_are_refused_and_the_job_keeps_running(digits, image_net, local_cluster):
    with pytest.raises(ValueError, match="shards must be at least partitions"):
        DownpourSGD(image_net, digits, shards=1, partitions=2)
    with pytest.raises(ValueError, match="rows of positions"):
        DownpourSGD(image_net, digits, shards=64, partitions=64)
    with pytest.raises(ValueError, match="downpour only"):
        RunConfig.make(algorithm="sandblaster", partitions=2)
    with pytest.raises(ValueError, match="shards must be at least partitions"):  # refused by the config itself
        RunConfig.make(algorithm="downpour", partitions=4, shards=3)
    with pytest.raises(ValueError, match="shards must be at least partitions"):
        RunConfig.make(algorithm="downpour", shards=2).replace(partitions=3)
    with DownpourSGD(image_net, digits, replicas=1, shards=2, partitions=2, optimizer="adagrad",
                     client=local_cluster.client) as d:
        d.fit(steps=20, progress=False)
        params, acc = d.parameter_state()
        for bad in (dict(partitions=3), dict(partitions=0), dict(shards=1), dict(partitions=True)):
            with pytest.raises(ValueError):
                d.set(**bad)
        assert d.config.downpour.partitions == 2 and d.layout.partitions == 2 and not d.events.of(Relayout)
        p2, a2 = d.parameter_state()
        np.testing.assert_array_equal(p2, params)
        np.testing.assert_array_equal(a2, acc)
        d.fit(steps=20, progress=False)
        assert d.snapshot().step >= 40 and [r.replica for r in d.replicas() if r.live] == [0]


def test_warm_start_then_add_and_remove_partitioned_replicas(digits, image_net, local_cluster):
    with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=2, warm_start_steps=30,
                     client=local_cluster.client) as d:
        d.fit(steps=80, progress=False)
        f = d.replicas()
        assert f[0].steps >= 30 and f[1].steps > 0  # replica 1 joined after the warm start
        assert f[1].steps < f[0].steps
        [new] = d.add_replicas(1)
        d.fit(steps=40, progress=False)
        assert d.replicas()[new].steps > 0 and len(d.replicas()[new].partitions) == 2
        assert _partition_actors(local_cluster, new) == 2
        assert d.remove_replicas(1) == [new]
        deadline = time.time() + 10  # its two partition actors are released (asynchronously)
        while _partition_actors(local_cluster, new) and time.time() < deadline:
            time.sleep(0.2)
        assert _partition_actors(local_cluster, new) == 0 and _partition_actors(local_cluster, 0) == 2
    with pytest.raises(RuntimeError, match="stopped"):
        d.set(partitions=1)
    assert d.report()["layout"]["partitions"] == 2


def test_set_before_start_only_records_the_layout(digits, image_net):
    d = DownpourSGD(image_net, digits, replicas=1, shards=3)
    d.set(partitions=3)
    assert d.config.downpour.partitions == 3 and d.layout.shards_of == ((0,), (1,), (2,))
    assert not d.events.of(Relayout)
    with pytest.raises(ValueError, match="shards must be at least partitions"):
        d.set(shards=2)
    assert d.config.shards == 3


@pytest.mark.cluster
def test_a_lost_partition_ends_its_replica_alone(digits, image_net):
    import os
    import signal

    from dbkit.runtime.dask import Cluster

    with Cluster(n_workers=5) as cluster:
        w = cluster.workers()
        with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=2, client=cluster.client,
                         shard_workers=[w[0]], replica_workers=w[1:], restart_replicas=False) as d:
            d.fit(steps=40, progress=False)
            where = {f.replica: [p.worker for p in f.partitions] for f in d.replicas()}
            assert not set(where[0]) & set(where[1])  # 4 workers: each replica on its own two
            victim = where[1][1]  # replica 1's partition 1; its task runs beside partition 0
            os.kill(cluster.client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
            before = d.replicas()[0].steps
            d.fit(seconds=3, progress=False)
            f = d.replicas()
            assert f[1].state in ("failed", "lost") and f[1].failures == 1, f[1]
            assert f[0].state == "paused" and f[0].steps > before
            survivor = where[1][0]  # the lost replica's other partition is dropped from its worker
            deadline = time.time() + 10  # the release reaches the worker asynchronously
            while any("replica1-partition" in str(k) for k in _actor_keys(cluster, survivor)) \
                    and time.time() < deadline:
                time.sleep(0.2)
            assert not any("replica1-partition" in str(k) for k in _actor_keys(cluster, survivor))
            # told to stop waiting for its dead partner, its step ends and its compute thread with it
            # (without abort() it would wait out the 120 s exchange timeout)
            while cluster.client.run(_partition_threads, workers=[survivor])[survivor] and time.time() < deadline:
                time.sleep(0.2)
            assert cluster.client.run(_partition_threads, workers=[survivor])[survivor] == []
            assert any("replica0-partition" in str(k) for k in _actor_keys(cluster, where[0][0]))
            reason = f[1].error
        report = d.report()
        # stop() left the lost replica as it was (it waited only on live ones)
        assert [r["state"] for r in report["replicas"]] == ["stopped", f[1].state]
        assert report["replicas"][1]["error"] == reason and "did not stop" not in reason


def _partition_actors(cluster, replica: int) -> int:
    found = cluster.client.run(lambda dask_worker: [str(k) for k in dask_worker.state.actors])
    return sum(f"replica{replica}-partition" in k for keys in found.values() for k in keys)


def _actor_keys(cluster, worker: str) -> list:
    return cluster.client.run(lambda dask_worker: list(dask_worker.state.actors), workers=[worker])[worker]


@pytest.mark.cluster
def test_a_replica_whose_partition_worker_dies_is_replaced_by_one_on_live_workers(digits, image_net):
    """With ``restart_replicas`` (the default), a partitioned replica lost with one partition's worker is
    started again, all of its partitions on live workers, on its data shard, and trains."""
    import os
    import signal

    from dbkit.runtime.dask import Cluster

    with Cluster(n_workers=5) as cluster:
        w = cluster.workers()
        with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=2, client=cluster.client,
                         shard_workers=[w[0]], replica_workers=w[1:]) as d:
            report = replaced_after_losing_a_partition(
                d, lambda victim: os.kill(cluster.client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL))
    assert report["faults"]["replicas_lost"] == 1 and report["faults"]["replicas_restarted"] == 1


def replaced_after_losing_a_partition(d, lose, wait: float = 90, partition: int = 1) -> dict:
    """Replica 1's ``partition`` lost with its worker (``lose(worker)``): the replica is started again, all of
    its partitions on live workers, and trains, as replica 0 does throughout; returns the report."""
    d.fit(steps=40, progress=False)
    where = {f.replica: [p.worker for p in f.partitions] for f in d.replicas()}
    victim = where[1][partition]
    before = d.replicas()[0].steps
    lose(victim)
    d.resume()
    deadline = time.time() + wait
    new: list[int] = []
    while time.time() < deadline:
        new = [e.replica for e in d.events.of(ReplicaEvent) if e.what == "restarted"]
        if new and d.replicas()[new[0]].steps > 0:
            break
        time.sleep(0.05)
    d.pause()
    (index,) = new
    f = d.replicas()[index]
    assert f.steps > 0 and victim not in [p.worker for p in f.partitions]
    (event,) = [e for e in d.events.of(ReplicaEvent) if e.what == "restarted"]
    assert event.reason == "replaces replica 1"
    assert d.replicas()[1].state in ("failed", "lost") and d.replicas()[0].steps > before
    return d.report()


def test_a_replica_whose_partition_worker_is_lost_in_process_is_replaced_on_live_workers(digits, image_net):
    """As the test above, with an in-process worker lost: the partner left waiting is told to stop, and the
    replacement's partitions train on live workers."""
    with InProcessCluster(workers=5) as m:
        w = m.workers()
        with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=2, cluster=m, shard_workers=[w[0]],
                         replica_workers=w[1:]) as d:
            report = replaced_after_losing_a_partition(d, m.lose_worker, wait=60)
        assert not any("replica1-partition" in k for keys in m.placed().values() for k in keys)
    assert report["faults"]["replicas_lost"] == 1 and report["faults"]["replicas_restarted"] == 1



def test_a_replacement_never_places_a_partition_on_the_lost_worker(digits, image_net):
    """Replica 1's partition 0 (and its task) lost: its replacement, replica 2, would take the lost worker for
    one of its partitions if the placement kept its first list of workers (seen in CI, where the run then
    failed); it must train on live workers only."""
    with InProcessCluster(workers=5) as m:
        w = m.workers()
        with DownpourSGD(image_net, digits, replicas=2, shards=2, partitions=2, cluster=m, shard_workers=[w[0]],
                         replica_workers=w[1:]) as d:
            report = replaced_after_losing_a_partition(d, m.lose_worker, wait=60, partition=0)
    assert report["faults"]["replicas_lost"] == 1 and report["faults"]["replicas_restarted"] == 1
