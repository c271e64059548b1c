"""Sandblaster replicas on Dask workers: a per-replica state actor, read in process
by the work-unit tasks pinned to its worker.

A replica fetches the batch's parameters once (at its first unit of the batch),
keeps each finished unit's gradient until the coordinator says whether its copy
won (``commit``) or lost to a backup (``discard``), and pushes the sum of
committed gradients to the shards every ``push_every`` units. Decisions travel
with the replica's next assignment, so no extra messages are needed.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..algorithms.work_units import WorkUnit, unit_gradient
from .shards import ShardHandles, connect

MIN_UNIT_SECONDS = 0.01  # a slowed replica is slowed relative to at least this much work per unit


class SandblasterReplica:
    """State of one replica (a Dask actor; unit tasks use it in process)."""

    def __init__(self, index: int, slow_factor: float = 1.0) -> None:
        self.index = index
        self.slow_factor = float(slow_factor)
        self.lock = threading.Lock()
        self.batch: int | None = None
        self.params: np.ndarray | None = None
        self.pending: dict[int, np.ndarray] = {}
        self.acc: np.ndarray | None = None
        self.unpushed: list[int] = []
        self.pushed: set[int] = set()  # every unit of this batch whose gradient this replica pushed
        self.units = 0
        self.pushes = 0
        self.fetches = 0

    def stats(self) -> dict:
        return {"replica": self.index, "units": self.units, "pushes": self.pushes, "fetches": self.fetches,
                "slow_factor": self.slow_factor}


def _apply(st: SandblasterReplica, batch: int, decisions: dict, server, push_every: int) -> list[int]:
    """Commit or discard finished units; push committed gradients if enough have gathered."""
    if st.batch != batch:
        return []
    pushed = []
    for u in decisions.get("commit", ()):
        grad, skip = st.pending.pop(u, (None, None))
        if grad is None:
            continue
        if skip:  # redone after a lost replica's partial push: only the shards that lack it
            _check(st, server.accumulate("acc", grad, (u,), frozenset(skip)))
            pushed.append(u)
            st.pushed.add(u)
        else:
            st.acc += grad
            st.unpushed.append(u)
    for u in decisions.get("discard", ()):
        st.pending.pop(u, None)
    if st.unpushed and len(st.unpushed) >= push_every:
        pushed += _push(st, server)
    return pushed


def _check(st: SandblasterReplica, answers: list[dict]) -> None:
    refused = [a["reason"] for a in answers if not a["accepted"]]
    if refused:
        raise FloatingPointError(f"replica {st.index}: shards refused its gradient: {refused}")


def _push(st: SandblasterReplica, server) -> list[int]:
    _check(st, server.accumulate("acc", st.acc, tuple(st.unpushed)))
    st.acc[:] = 0.0
    pushed, st.unpushed = st.unpushed, []
    st.pushed.update(pushed)
    st.pushes += 1
    return pushed


def run_unit(state_key: str, shards: ShardHandles, network, X: np.ndarray, y: np.ndarray, unit: WorkUnit,
             n_total: int, batch: int, vector: str, decisions: dict, push_every: int, skip: tuple = ()) -> dict:
    """Compute one work unit on this replica; returns its loss and the units it pushed."""
    from distributed import get_worker
    from threadpoolctl import threadpool_limits

    st = get_worker().state.actors[state_key]
    server = connect(shards)
    with st.lock:
        if st.batch != batch:  # first unit of a new batch: fetch the parameters once
            st.batch, st.pending, st.unpushed, st.pushed = batch, {}, [], set()
            st.params = server.fetch_vector(vector)
            st.acc = np.zeros_like(st.params)
            st.fetches += 1
        pushed = _apply(st, batch, decisions, server, push_every)
        params = st.params
    t0 = time.perf_counter()
    with threadpool_limits(1):
        loss, grad = unit_gradient(network, params, X, y, unit, n_total)
    if st.slow_factor > 1:
        time.sleep((st.slow_factor - 1) * max(time.perf_counter() - t0, MIN_UNIT_SECONDS))
    with st.lock:
        if st.batch == batch:  # a straggler from an old batch must not leak into this one
            st.pending[unit.index] = (grad, skip)
            st.units += 1
    return {"unit": unit.index, "batch": batch, "loss": float(loss), "pushed": pushed}


def flush(state_key: str, shards: ShardHandles, batch: int, decisions: dict) -> list[int]:
    """End of batch: apply the last decisions, push whatever was committed, and return every
    unit of this batch this replica has pushed, by this call or by a unit task (whose result
    the coordinator may not have read yet)."""
    from distributed import get_worker

    st = get_worker().state.actors[state_key]
    server = connect(shards)
    with st.lock:
        _apply(st, batch, decisions, server, push_every=10**9)
        if st.batch == batch and st.unpushed:
            _push(st, server)
        st.pending.clear()
        return sorted(st.pushed) if st.batch == batch else []
