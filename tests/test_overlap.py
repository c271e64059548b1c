"""Downpour's client as the paper writes it: fetches and pushes start and the replica computes on.
Checked against the blocking replica (instant communication: bit for bit) and against shards that
answer late (nothing lost or applied twice, staleness grows by at most what was under way)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from dbkit import data, nn
from dbkit.downpour import DownpourReplica
from dbkit.downpour.exchange import CHUNK, Exchange
from dbkit.ps import ShardedParameters, balanced_layout, local_shards


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.mark.parametrize("n_fetch, n_push", [(1, 1), (3, 2), (2, 5), (4, 4)])
def test_with_instant_communication_the_overlapped_replica_is_the_blocking_one(digits, n_fetch, n_push):
    net = nn.build("mlp", 64, 10, hidden=(16,), l2=1e-4)
    runs = []
    for overlap in (False, True):
        server = local_shards(net.init_params(0), 2, "adagrad", 0.05)
        replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_fetch=n_fetch, n_push=n_push,
                                  lr=0.05, overlap=overlap)
        for _ in range(37):
            replica.step()
        replica.flush()
        f = replica.figures()
        runs.append((server.fetch().tobytes(), replica.params.tobytes(), f.pushes, f.fetches, f.staleness, f.age))
    assert runs[0] == runs[1]


class LateShard:
    """A shard that answers ``delay`` seconds after each call, in the order called (as an actor's one
    thread does): its calls return futures with ``done()`` and ``result()``."""

    def __init__(self, shard, delay: float) -> None:
        self.shard, self.delay = shard, delay
        self.pool = ThreadPoolExecutor(1)
        self.calls = []

    def __getattr__(self, name):
        method = getattr(self.shard, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            args = tuple(np.array(a) if isinstance(a, np.ndarray) else a for a in args)  # as sent on the wire

            def later():
                time.sleep(self.delay)
                return method(*args, **kwargs)
            return self.pool.submit(later)
        return call


def test_with_late_shards_no_gradient_is_lost_or_applied_twice_and_staleness_stays_bounded(digits):
    net = nn.build("linear", 64, 10)
    inner = local_shards(net.init_params(0), 2, "sgd", 0.01)
    late = [LateShard(s, 0.004) for s in inner.shards]
    server = ShardedParameters(late, balanced_layout(net.size, 2))
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_fetch=1, n_push=1, lr=0.01)
    for _ in range(60):
        replica.step()
    replica.flush()
    f = replica.figures()
    assert f.steps == 60 and f.pushes == 60  # one push per step, every answer counted
    for s in inner.shards:
        figures = s.figures()
        assert figures.version == f.pushes and figures.rejected == 0  # each push applied exactly once
        assert figures.examples == 60 * 16  # every example's gradient landed
        assert max(figures.staleness.values) <= 1  # at most the one push under way when it fetched
    # it computed on while its push and fetch were under way: its pushes were one version behind (a
    # blocking replica's never are: see below), and flush waited for everything
    assert f.staleness.values == (0, 1) and f.staleness.counts[1] > 50
    assert not replica.under_way
    blocking = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, lr=0.01, overlap=False)
    for _ in range(10):
        blocking.step()
    assert blocking.figures().staleness.values == (0,)


def test_the_gradient_under_way_is_never_changed_while_a_shard_may_read_it(digits):
    net = nn.build("linear", 64, 10)
    inner = local_shards(net.init_params(0), 1, "sgd", 0.01)
    seen, lock = [], threading.Lock()

    class Reading(LateShard):  # keeps a reference, not a copy: a shard on the same worker reads in place
        def __getattr__(self, name):
            method = getattr(self.shard, name)

            def call(*args, **kwargs):
                sent = args[0].copy() if name in ("push", "push_fetch") else None

                def later():
                    time.sleep(self.delay)
                    if sent is not None:
                        with lock:
                            seen.append((sent, args[0].copy()))  # as sent, and as the shard reads it
                    return method(*args, **kwargs)
                return self.pool.submit(later)
            return call

    server = ShardedParameters([Reading(inner.shards[0], 0.003)], balanced_layout(net.size, 1))
    replica = DownpourReplica(0, net, digits.X_train, digits.y_train, server, 16, n_push=2, lr=0.01)
    for _ in range(30):
        replica.step()
    replica.flush()
    assert len(seen) == replica.figures().pushes == 15
    assert all(np.array_equal(sent, read) for sent, read in seen) and all(np.abs(s).sum() > 0 for s, _ in seen)


@pytest.mark.parametrize("partitions", [1, 2])
def test_on_a_cluster_one_replica_computes_on_while_its_push_is_under_way(digits, local_cluster, partitions):
    """One replica (whole, or in two partitions each with its own shards) against real shard actors: with
    overlap a whole replica's pushes are often one version behind (it computed the next gradient before the
    last push_fetch came back), never more; blocking, never. Either way every push lands exactly once. (A
    partition's push usually comes back while its driver starts the next step, so it shows no lag.)"""
    import dbkit

    net = nn.build("image-local", 64, 10, image_shape=(8, 8)) if partitions > 1 else nn.build("mlp", 64, 10)
    seen = {}
    for overlap in (True, False):
        with dbkit.DownpourSGD(net, digits, replicas=1, shards=2, partitions=partitions, optimizer="sgd", lr=0.02,
                               overlap=overlap, client=local_cluster.client, eval_every=10**6) as job:
            job.fit(steps=150, progress=False)
            report = job.report()
        [replica] = report["replicas"]
        shard_updates = [s["updates"] for s in report["shards"]]
        pushes = replica["pushes"]
        assert all(u == pushes for u in shard_updates) if partitions == 1 else sum(shard_updates) >= pushes
        assert all(s["rejected"] == 0 for s in report["shards"])
        seen[overlap] = max(s["staleness"]["max"] for s in report["shards"]), \
            sum(s["staleness"]["mean"] for s in report["shards"]) / len(report["shards"])
    assert seen[False] == (0, 0.0)
    assert seen[True][0] <= 1
    if partitions == 1:
        assert seen[True][0] == 1 and seen[True][1] > 0.3  # at most the one push under way, and often


@pytest.mark.parametrize("size", [10, CHUNK, 2 * CHUNK + 7])
def test_accrue_with_a_local_step_is_the_two_textbook_updates(size):
    """The chunked accrue-and-step pass against plain numpy: accrued += g and params -= lr * g, bit for bit."""
    rng = np.random.default_rng(size)
    grad, params = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
    server = local_shards(np.zeros(size, np.float32), 1)
    ex = Exchange(server, size, overlap=True, on_params=lambda p: None, on_answers=lambda a: None)
    ex.accrue(rng.standard_normal(size).astype(np.float32), 32)
    accrued_before, lr = ex.accrued.copy(), 0.037
    want_accrued, want_params = accrued_before + grad, params - np.float32(lr) * grad
    ex.accrue(grad.copy(), 32, (params, lr))
    assert ex.accrued.tobytes() == want_accrued.tobytes() and params.tobytes() == want_params.tobytes()
    assert ex.examples == 64


@pytest.mark.parametrize("local", [False, True])
def test_after_a_push_the_next_gradient_starts_a_fresh_sum(local):
    """The accrued buffer is not zeroed after a push (a pass over the vector saved): the next accrue
    overwrites it. What each push carries is still exactly the sum since the one before; a push with
    nothing accrued carries zeros."""
    size, lr = 2 * CHUNK + 3, 0.01
    rng = np.random.default_rng(7)
    g = [rng.standard_normal(size).astype(np.float32) for _ in range(3)]
    server, twin = (local_shards(np.zeros(size, np.float32), 2, "sgd", 1.0) for _ in range(2))
    ex = Exchange(server, size, overlap=False, on_params=lambda p: None, on_answers=lambda a: None)
    params = np.zeros(size, np.float32)
    for pushed in ([g[0], g[1]], [g[2]], []):
        for x in pushed:
            ex.accrue(x.copy(), 8, (params, lr) if local else None)
        ex.push(and_fetch=False)
        twin.push(sum(pushed, np.zeros(size, np.float32)))
    assert server.fetch().tobytes() == twin.fetch().tobytes() and server.versions == [3, 3]
