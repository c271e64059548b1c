"""Parameter shards as Dask actors, one per worker where possible (DistBelief Sec. 4.1)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ps import ParameterShard, ShardedParameters, ShardLayout, UpdateRule, balanced_layout
from ..ps.client import owned_end
from ..ps.records import WireAddress
from ..ps.threaded_shard import ThreadedShard
from ..ps.wire_client import WireShard
from .protocol import Runtime, TaskSide


def start_shards(cluster: Runtime, initial: np.ndarray, n_shards: int, optimizer: str | UpdateRule = "sgd",
                 lr: float = 0.1, prefix: str = "shard", workers: list[str] | None = None,
                 layout: ShardLayout | None = None) -> ShardedParameters:
    """Place ``n_shards`` ``ParameterShard`` actors over ``initial``, round-robin over ``workers`` (default: all).

    ``layout`` defaults to balanced contiguous ranges. Returns a
    ``ShardedParameters`` whose fetch and push go to the actors.
    """
    layout = layout or balanced_layout(len(initial), n_shards)
    if layout.n_shards != n_shards or layout.size != len(initial):
        raise ValueError(f"a layout of {layout.n_shards} shards over {layout.size} parameters does not fit "
                         f"{n_shards} shards over {len(initial)}")
    specs = [(i, a, b, np.asarray(initial[a:b], dtype=np.float32), optimizer, lr)
             for i, (a, b) in enumerate(layout.ranges)]
    workers = workers or cluster.workers()
    if not workers:
        raise RuntimeError("the cluster has no workers to place parameter shards on")
    proxies = [cluster.place_actor(f"{prefix}{i}", ParameterShard, *args, worker=workers[i % len(workers)])
               for i, args in enumerate(specs)]
    workers = [cluster.registry.worker(f"{prefix}{i}") for i in range(n_shards)]
    return ShardedParameters(proxies, layout, workers=workers)


@dataclass(frozen=True)
class ShardHandles:
    """Plain-data addresses of shard actors, to send to tasks instead of proxies.

    A task argument is kept by the scheduler while the task is known; an actor
    proxy inside it holds a Future, which would keep the shard alive after
    ``stop()``. Strings hold nothing. ``wires`` (one per shard, or empty) are
    where each shard's worker serves fetch and push over a socket
    (``dbkit.runtime.dask.wire``); empty, or ``None`` for a shard, means through Dask.
    """

    layout: ShardLayout
    keys: tuple[str, ...]
    workers: tuple[str, ...]
    wires: tuple[WireAddress | None, ...] = ()


def handles_of(server: ShardedParameters, which: list[int] | None = None, layout: ShardLayout | None = None,
               wires: dict[str, WireAddress | None] | None = None) -> ShardHandles:
    """Handles of ``server``'s shards (of those numbered ``which``, with ``layout`` over them, if given);
    with ``wires`` (worker -> address, ``Cluster.wires.addresses``) replicas fetch and push over sockets."""
    which = list(range(len(server.shards))) if which is None else which
    workers = tuple(server.workers[i] for i in which)
    return ShardHandles(layout or server.layout, tuple(str(server.shards[i].key) for i in which), workers,
                        tuple(wires.get(w) for w in workers) if wires is not None else ())


def connect(handles: ShardHandles, side: TaskSide, colocated: bool = True, name: str | None = None,
            threaded: bool = False) -> ShardedParameters:
    """Handles to the shards named by ``handles``, for use inside a task (or an actor) on the worker whose
    side is ``side``.

    A shard on another worker is reached through an actor proxy, and its
    fetches and pushes through its worker's wire when ``handles.wires`` has
    one (``WireShard``: a socket, not Dask's per-call machinery). A shard on
    *this* worker is, with ``colocated``, called in process: no serialisation,
    no TCP, and no wait for the worker's actor thread. That is safe because
    ``ParameterShard`` guards its state with a lock and ``fetch`` returns a copy.
    With ``threaded``, such a shard's fetches and pushes run on a thread of
    their own (``ThreadedShard``), beside the caller's computing. Close the
    result (``ShardedParameters.close``) to end its connections and threads.
    """
    wires = handles.wires or (None,) * len(handles.keys)
    shards: list = []
    try:
        for k, w, wire in zip(handles.keys, handles.workers, wires):
            here = side.local(k) if colocated else None
            if here is not None:
                shards.append(ThreadedShard(here) if threaded else here)
            elif wire is not None:
                shards.append(WireShard(wire, k, pusher=name, fallback=side.remote(ParameterShard, w, k)))
            else:
                shards.append(side.remote(ParameterShard, w, k))
    except BaseException:
        for s in shards:
            if owned_end(s):  # a proxy's ``close`` would be a call to the shard
                s.close()
        raise
    return ShardedParameters(shards, handles.layout, workers=list(handles.workers), name=name)
