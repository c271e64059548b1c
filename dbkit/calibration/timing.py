"""What the wire costs, measured on a running cluster: a fetch and a push through parameter shards
(paper Sec. 4.1), and one training step of a partitioned replica (Sec. 3).

The lessons and ``benchmarks/`` both use these, so a notebook's plot and a
benchmark's table come from the same measurement.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any

import numpy as np

from ..nn import Network

if TYPE_CHECKING:
    from ..runtime.dask.cluster import Cluster

_names = count()
BLOCK = 4  # steps of one configuration in a row when several are timed interleaved (the first not counted)


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median milliseconds of ``repeats`` calls of ``fn`` after one call to warm up."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times) * 1e3)


@dataclass(frozen=True)
class RoundTrip:
    """Median times of a full fetch, a full push, and both back to back (a Downpour step at
    ``n_fetch = n_push = 1``), from the client, for ``parameters`` float32 over ``shards`` shards."""

    parameters: int
    shards: int
    fetch_ms: float
    push_ms: float
    fetch_plus_push_ms: float

    @property
    def megabytes(self) -> float:
        return self.parameters * 4 / 1e6


def time_roundtrip(cluster: Cluster, parameters: int, shards: int, repeats: int = 20,
                   transport: str = "actor") -> RoundTrip:
    """Time a fetch and a push of ``parameters`` float32 through ``shards`` fresh shards on ``cluster``.

    ``transport="actor"`` calls the shard actors through Dask; ``"socket"``
    reaches them over their workers' shard wire (``dbkit.runtime.dask.wire``), as
    Downpour's replicas do by default. The shards are started for the
    measurement and released after it.
    """
    from ..ps import ShardedParameters
    from ..ps.wire_client import WireShard
    from ..runtime.shards import start_shards

    if not 1 <= shards <= parameters:
        raise ValueError(f"need 1 <= shards <= parameters, got {shards} shards for {parameters} parameters")
    if transport not in ("actor", "socket"):
        raise ValueError(f"transport must be 'actor' or 'socket', got {transport!r}")
    prefix = f"timing{next(_names)}-{parameters}x{shards}-"
    ps = start_shards(cluster, np.zeros(parameters, np.float32), shards, "sgd", 1e-6, prefix=prefix)
    grad = np.ones(parameters, np.float32)
    try:
        if transport == "socket":
            wires = cluster.wires.addresses(ps.workers)
            ps = ShardedParameters([s if (address := wires[w]) is None else WireShard(address, str(s.key), fallback=s)
                                    for s, w in zip(ps.shards, ps.workers)], ps.layout, ps.workers)
        fetch = median_ms(ps.fetch, repeats)
        push = median_ms(lambda: ps.push(grad), repeats)
        both = median_ms(lambda: (ps.fetch(), ps.push(grad)), repeats)
    finally:
        ps.close()
        cluster.registry.release(*[f"{prefix}{i}" for i in range(shards)])
    return RoundTrip(parameters, shards, fetch, push, both)


@dataclass(frozen=True)
class PartitionStep:
    """Median milliseconds of one forward and backward pass of a batch, in ``k`` partitions and in 1
    (measured interleaved, in one run), with the bytes sent between partitions per step and the
    minimum the connectivity needs; ``baseline_ms``, the median of a baseline timed alongside."""

    k: int
    step_ms: float
    k1_ms: float
    bytes_per_step: float
    min_bytes_per_step: int
    baseline_ms: float | None = None
    transport: str = "socket"
    compute_ms: float | None = None  # the busiest partition's arithmetic per step (wall ms in its layers' parts)
    rest_ms: float | None = None  # a step beyond its busiest partition's arithmetic (median over the steps)

    @property
    def speedup(self) -> float:
        return self.k1_ms / self.step_ms


def time_partitioned_step(cluster: Cluster, network: Network, k: int, steps: int = 10, batch: int = 32,
                          whole: bool = False, transport: str = "socket") -> PartitionStep:
    """Time one step of ``network`` split into ``k`` partitions on ``cluster``'s first ``k`` workers,
    against the same network in one partition, interleaved in blocks of ``BLOCK`` steps (the first of
    each block not counted: a partition whose core sat idle while the other configuration ran starts
    slower, which a replica training step after step never does).

    Parameters and the batch stay on the partitions, as in Downpour where each
    partition pushes its own gradients. With ``transport="socket"`` the steps are
    started from a task on partition 0's worker, as a Downpour replica's task
    starts its partitions' steps (one message to each partner per step); with
    ``"actor"``, from here, with an actor call to each partition. ``whole``
    also times the unpartitioned ``Network.loss_and_grad`` on that worker (one
    BLAS thread) once per step, so all ratios come from one run under the same
    conditions.
    """
    from ..partition.actor_network import ActorPartitionedNetwork

    workers = cluster.workers()
    if not 1 <= k <= len(workers):
        raise ValueError(f"k must be in [1, {len(workers)}] (the cluster's workers), got {k}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, network.in_size)).astype(np.float32)
    y = rng.integers(0, network.n_classes, batch)
    params = network.init_params(0)
    tag = next(_names)
    replicas = {kk: ActorPartitionedNetwork(cluster, network, kk, workers=workers[:kk], name=f"timing{tag}-k{kk}",
                                            transport=transport)
                for kk in sorted({1, k})}
    try:
        for rep in replicas.values():
            rep.set_params(params)
            rep.load_batch(X, y)
        first = replicas[k].run(None, None, return_grad=False)  # warm up
        sent0 = sum(r["bytes_sent"] for r in first)
        baseline = tuple(cluster.put(a, workers[0]) for a in (network, params, X, y)) if whole else None
        if all(rep.wired for rep in replicas.values()):
            keys = {kk: str(rep.parts[0].key) for kk, rep in replicas.items()}
            times, busy, base = cluster.submit_on(workers[0], _lead_steps, keys, steps, baseline,
                                                  key=f"timing{tag}-steps").result()
        else:
            times, busy, base = _call_steps(replicas, steps, None if baseline is None else lambda: cluster.submit_on(
                workers[0], _whole_step_task, baseline, key=f"timing{tag}-whole-{time.perf_counter_ns()}").result())
        last = replicas[k].run(None, None, return_grad=False)  # cumulative counts
        counted = sum(_blocks(steps, BLOCK)) + 1  # the steps since the warm-up, this one included
        sent = sum(r["bytes_sent"] for r in last)
        return PartitionStep(k, 1e3 * float(np.median(times[k])), 1e3 * float(np.median(times[1])),
                             (sent - sent0) / counted if k > 1 else 0.0, replicas[k].minimum_bytes(batch),
                             1e3 * float(np.median(base)) if base else None, transport,
                             1e3 * float(np.median(busy[k])),
                             1e3 * float(np.median(np.subtract(times[k], busy[k]))))
    finally:
        for rep in replicas.values():
            rep.release()


def _whole_step(baseline: tuple) -> float:
    network, params, X, y = baseline
    t = time.perf_counter()
    network.loss_and_grad(params, X, y)
    return time.perf_counter() - t


def _whole_step_task(side: Any, baseline: tuple) -> float:
    """The whole network's step in a task, with one BLAS thread, as the partitions compute; its seconds."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _whole_step(baseline)


def _blocks(steps: int, block: int) -> list[int]:
    """Rounds of ``block`` steps of each configuration, the first of each a warm-up, to give ``steps``
    timed steps each: a partition whose core sat idle while another configuration ran starts slower."""
    timed = max(1, block - 1)
    return [timed + 1] * -(-steps // timed)


class _Busiest:
    """The busiest partition's arithmetic in each step, from the partitions' cumulative ``compute_seconds``."""

    def __init__(self) -> None:
        self.before: list[float] | None = None

    def step(self, results: list[dict[str, Any]]) -> float:
        now = [float(r["compute_seconds"]) for r in results]
        spent = max(a - b for a, b in zip(now, self.before)) if self.before is not None else max(now)
        self.before = now
        return spent


Timed = tuple[dict[int, list[float]], dict[int, list[float]], list[float]]  # step seconds, arithmetic, whole


def _call_steps(replicas: dict, steps: int, whole: Callable[[], float] | None, block: int = BLOCK) -> Timed:
    """Each step of each replica started from here (an actor call to each partition), and ``whole()`` (the
    whole network's seconds in a task) alongside; seconds each, and each timed step's busiest arithmetic."""
    times: dict[int, list[float]] = {kk: [] for kk in replicas}
    busy: dict[int, list[float]] = {kk: [] for kk in replicas}
    busiest = {kk: _Busiest() for kk in replicas}
    base: list[float] = []
    for n in _blocks(steps, block):
        if whole is not None:
            base += [whole() for _ in range(n)][1:]
        for kk, rep in replicas.items():
            for i in range(n):
                t = time.perf_counter()
                results = rep.run(None, None, return_grad=False)
                spent = time.perf_counter() - t
                arithmetic = busiest[kk].step(results)
                if i:
                    times[kk].append(spent)
                    busy[kk].append(arithmetic)
    return times, busy, base


def _lead_steps(side: Any, keys: dict[int, str], steps: int, baseline: tuple | None, block: int = BLOCK) -> Timed:
    """A task on the partitions 0's worker: each step of each wired replica started here by its partition 0
    (``dbkit.partition.lead``), and the whole network's, interleaved in blocks; seconds each, and each timed
    step's busiest arithmetic."""
    from threadpoolctl import threadpool_limits

    from ..partition.lead import lead

    leads: dict[int, Any] = {kk: side.local(key) for kk, key in keys.items()}
    times: dict[int, list[float]] = {kk: [] for kk in keys}
    busy: dict[int, list[float]] = {kk: [] for kk in keys}
    busiest = {kk: _Busiest() for kk in keys}
    base: list[float] = []
    step = 10**6
    with threadpool_limits(1):
        for n in _blocks(steps, block):
            if baseline is not None:
                base += [_whole_step(baseline) for _ in range(n)][1:]
            for kk, partition in leads.items():
                for i in range(n):
                    step += 1
                    t = time.perf_counter()
                    results = lead(partition, step, "run", {"return_grad": False})
                    spent = time.perf_counter() - t
                    arithmetic = busiest[kk].step([meta for meta, _ in results])
                    if i:
                        times[kk].append(spent)
                        busy[kk].append(arithmetic)
    return times, busy, base
