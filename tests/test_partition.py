"""Model partitioning in process: equal to the unpartitioned network, and the minimum traffic."""

import asyncio

import numpy as np
import pytest

from dbkit import nn
from dbkit.partition import PartitionedNetwork, PartitionWorker, boundary_floats, describe, needs, ownership


def _batch(n_features, n_classes, seed=0, n=6):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, n_features)).astype(np.float32), rng.integers(0, n_classes, n)


@pytest.mark.parametrize("name,hidden", [("image-local", None), ("mlp", (32, 16))])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_partitioned_equals_unpartitioned(name, hidden, k):
    net = nn.build(name, 64, 10, hidden=hidden, l2=0.01)
    params = net.init_params(2)
    X, y = _batch(64, 10)
    loss, grad = net.loss_and_grad(params, X, y)
    ploss, pgrad = PartitionedNetwork(net, k).loss_and_grad(params, X, y)
    assert ploss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(pgrad, grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_measured_bytes_equal_the_connectivity_minimum(k):
    net = nn.build("image-local", 64, 10)
    X, y = _batch(64, 10, n=7)
    pn = PartitionedNetwork(net, k)
    pn.loss_and_grad(net.init_params(0), X, y)
    floats = boundary_floats(pn.ownership)
    assert pn.bytes_between_partitions == 4 * 7 * (floats["forward"] + floats["backward"])


def test_locally_connected_layers_send_far_less_than_fully_connected_ones():
    local = nn.LocallyConnected2D(6, 6, 8, kernel=3, filters=8)  # 288 -> 128 units
    dense = nn.Dense(288, 128)  # the same units, all-to-all
    first = nn.LocallyConnected2D(8, 8, 1, kernel=3, filters=8)  # 64 -> 288
    for k in (2, 4):
        lc = sum(u.size for u in needs(ownership(nn.Network([first, local]), k), 1).values())
        fc = sum(u.size for u in needs(ownership(nn.Network([first, dense]), k), 1).values())
        assert fc == (k - 1) * 288  # every partition needs every other partition's units
        assert lc * 3 <= fc  # only the boundary rows cross


def test_units_and_parameters_are_owned_exactly_once():
    net = nn.build("image-local", 64, 10)
    p = ownership(net, 3)
    owner = p.param_owner
    assert set(np.unique(owner)) == {0, 1, 2}
    assert sum(len(p.param_indices(q)) for q in range(3)) == net.size
    rows = describe(net, 3)
    for row, layer in zip(rows, net.layers):
        assert sum(row["units_per_partition"]) == layer.out_size
    assert sum(sum(r["params_per_partition"]) for r in rows) == net.size
    # spatial bands: neighbouring rows of positions stay together
    first = p.owner[0].reshape(6, 6, 8)
    assert all(len(np.unique(first[r])) == 1 for r in range(6))


def test_too_many_partitions_is_a_clear_error():
    with pytest.raises(ValueError, match="fewer than"):
        ownership(nn.build("image-local", 64, 10), 7)
    with pytest.raises(ValueError, match="partitions must be"):
        ownership(nn.build("linear", 4, 2), 0)


def _in_process(net, k, params, X, y):
    """K ``PartitionWorker`` s wired to each other in one process, one step; their assembled loss and gradient."""
    own = ownership(net, k)
    workers = [PartitionWorker(j, own) for j in range(k)]

    async def step():
        for w in workers:
            await w.connect(workers)
        for j, w in enumerate(workers):
            await w.set_params(params[own.param_indices(j)])
        return await asyncio.gather(*(w.run_step(1, X[:, w.input_cols], y) for w in workers))

    try:
        results = asyncio.run(step())
    finally:
        for w in workers:
            w.shutdown()
    grad = np.zeros_like(params)
    for j, r in enumerate(results):
        grad[own.param_indices(j)] = r["grad"]
    return sum((r["loss"] or 0.0) + r["penalty"] for r in results), grad, sum(r["bytes_sent"] for r in results)


@pytest.mark.parametrize("name,hidden", [("image-local", None), ("mlp", (32, 16))])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_partition_workers_wired_in_process_equal_the_whole_network(name, hidden, k):
    net = nn.build(name, 64, 10, hidden=hidden, l2=0.01)
    params = net.init_params(4)
    X, y = _batch(64, 10, seed=1, n=8)
    loss, grad = net.loss_and_grad(params, X, y)
    ploss, pgrad, sent = _in_process(net, k, params, X, y)
    assert ploss == pytest.approx(loss, rel=1e-6)
    np.testing.assert_allclose(pgrad, grad, rtol=1e-5, atol=1e-6)
    f = boundary_floats(ownership(net, k))
    assert sent == 4 * 8 * (f["forward"] + f["backward"])  # exactly what the connectivity requires


def test_a_partition_needs_all_its_partners():
    own = ownership(nn.build("image-local", 64, 10), 2)
    worker = PartitionWorker(0, own)
    with pytest.raises(ValueError, match="needs 2 partners"):
        asyncio.run(worker.connect([worker]))


@pytest.mark.cluster
@pytest.mark.parametrize("transport", ["socket", "actor"])
@pytest.mark.parametrize("name,hidden", [("image-local", None), ("mlp", (32, 16))])
def test_partitions_as_actors_equal_the_unpartitioned_network(local_cluster, name, hidden, transport):
    from dbkit.partition import ActorPartitionedNetwork

    net = nn.build(name, 64, 10, hidden=hidden, l2=0.01)
    params = net.init_params(4)
    X, y = _batch(64, 10, seed=1, n=8)
    loss, grad = net.loss_and_grad(params, X, y)
    for k in (1, 2, 3, 4):  # on 2 workers: K = 3 and 4 mix partitions in one process and on another
        replica = ActorPartitionedNetwork(local_cluster, net, k, name=f"{name}-k{k}-{transport}", transport=transport)
        try:
            assert replica.wired == (transport == "socket")
            ploss, pgrad = replica.loss_and_grad(params, X, y)
            assert ploss == pytest.approx(loss, rel=1e-6)
            np.testing.assert_allclose(pgrad, grad, rtol=1e-5, atol=1e-6)
            assert replica.bytes_between_partitions == replica.minimum_bytes(8)
        finally:
            replica.release()


@pytest.mark.cluster
def test_a_batch_left_on_the_partitions_gives_the_same_step(local_cluster):
    from dbkit.partition import ActorPartitionedNetwork

    net = nn.build("image-local", 64, 10, l2=0.01)
    X, y = _batch(64, 10, seed=3, n=5)
    replica = ActorPartitionedNetwork(local_cluster, net, 2, name="held")
    try:
        replica.set_params(net.init_params(1))
        sent = replica.run(X, y)
        replica.load_batch(X, y)
        held = replica.run(None, None)
        for a, b in zip(sent, held):
            np.testing.assert_array_equal(a["grad"], b["grad"])
    finally:
        replica.release()


@pytest.mark.cluster
@pytest.mark.parametrize("transport", ["socket", "actor"])
def test_an_aborted_partition_stops_waiting_for_its_partner(local_cluster, transport):
    import time

    from dbkit.partition import ActorPartitionedNetwork

    net = nn.build("image-local", 64, 10)
    X, y = _batch(64, 10, seed=4, n=5)
    replica = ActorPartitionedNetwork(local_cluster, net, 2, name=f"aborted-{transport}", transport=transport)
    try:
        replica.set_params(net.init_params(1))
        replica.load_batch(X, y)
        first, second = replica.parts
        waiting = first.run_step(1, None, None)  # its partner never steps: it waits (120 s at most)
        deadline = time.time() + 30
        while not first.waiting_for().result() and time.time() < deadline:
            time.sleep(0.05)
        assert first.waiting_for().result()[0][:2] == (1, "f") and not waiting.done()  # a forward boundary
        assert first.abort("partner gone").result() == 1  # the one wait in progress ends now
        with pytest.raises(RuntimeError, match="aborted: partner gone"):
            waiting.result(timeout=30)
        with pytest.raises(RuntimeError, match="aborted"):  # and every later step refuses at once
            first.run_step(2, None, None).result(timeout=30)
        assert second.abort("x").result() == 0  # nothing was waiting there
    finally:
        replica.release()
