"""One Sandblaster replica's state between work units (DistBelief Sec. 4.2).

A replica fetches the batch's parameters once (at its first unit of the
batch), keeps each finished unit's gradient until the coordinator says whether
its copy won (``commit``) or lost to a backup (``discard``), and pushes the sum
of committed gradients to the shards every ``push_every`` units. Decisions
travel with the replica's next assignment, so no extra messages are needed.

Plain numpy with a lock: on Dask the object is an actor that the unit tasks
pinned to its worker use in process (``dbkit.cluster.sandblaster.tasks``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from ..nn import Network
from ..ps import PushAnswer
from .dispatcher import Assignment, Decisions, UnitResult
from .work_units import unit_gradient

MIN_UNIT_SECONDS = 0.01  # a slowed replica is slowed relative to at least this much work per unit


@dataclass(frozen=True)
class SandblasterReplicaFigures:
    replica: int
    units: int
    pushes: int
    fetches: int
    slow_factor: float


class SandblasterReplica:
    """State of replica ``index``; ``slow_factor`` > 1 makes each unit take that many times longer.

    ``lock`` guards its state between a unit and a flush of the same replica (default a thread lock;
    the simulator gives one that waits in virtual time).
    """

    def __init__(self, index: int, slow_factor: float = 1.0, sleep: Callable[[float], None] = time.sleep,
                 lock: AbstractContextManager | None = None) -> None:
        self.index = index
        self.slow_factor = float(slow_factor)
        self.sleep = sleep
        self.lock = lock if lock is not None else threading.Lock()
        self.batch: int | None = None
        self.params: np.ndarray | None = None
        self.pending: dict[int, tuple[np.ndarray, frozenset[int]]] = {}
        self.acc: np.ndarray | None = None
        self.unpushed: list[int] = []
        self.pushed: set[int] = set()  # every unit of this batch whose gradient this replica pushed
        self.units = self.pushes = self.fetches = 0

    def set_slow(self, factor: float) -> float:
        self.slow_factor = float(factor)
        return self.slow_factor

    def figures(self) -> SandblasterReplicaFigures:
        return SandblasterReplicaFigures(self.index, self.units, self.pushes, self.fetches, self.slow_factor)

    def run_unit(self, server, network: Network, X: np.ndarray, y: np.ndarray, job: Assignment, n_total: int,
                 vector: str, push_every: int) -> UnitResult:
        """Apply ``job.decisions``, compute ``job.unit`` at shard vector ``vector``; returns its share of the loss."""
        with self.lock:
            if self.batch != job.batch:  # first unit of a new batch: fetch the parameters once
                self.batch, self.pending, self.unpushed, self.pushed = job.batch, {}, [], set()
                self.params = server.fetch_vector(vector)
                self.acc = np.zeros_like(self.params)
                self.fetches += 1
            pushed = self._apply(job.batch, job.decisions, server, push_every)
            params = self.params
        assert params is not None
        t0 = time.perf_counter()
        loss, grad = unit_gradient(network, params, X, y, job.unit, n_total)
        if self.slow_factor > 1:
            self.sleep((self.slow_factor - 1) * max(time.perf_counter() - t0, MIN_UNIT_SECONDS))
        with self.lock:
            if self.batch == job.batch:  # a straggler from an old batch must not leak into this one
                self.pending[job.unit.index] = (grad, job.skip)
                self.units += 1
        return UnitResult(job.unit.index, job.batch, float(loss), tuple(pushed))

    def flush(self, server, batch: int, decisions: Decisions) -> list[int]:
        """End of batch: apply the last decisions, push whatever was committed, and return every
        unit of this batch this replica has pushed, by this call or by a unit task (whose result
        the coordinator may not have read yet)."""
        with self.lock:
            self._apply(batch, decisions, server, push_every=10**9)
            if self.batch == batch and self.unpushed:
                self._push(server)
            self.pending.clear()
            return sorted(self.pushed) if self.batch == batch else []

    def _apply(self, batch: int, decisions: Decisions, server, push_every: int) -> list[int]:
        """Commit or discard finished units; push committed gradients if enough have gathered."""
        if self.batch != batch:
            return []
        assert self.acc is not None
        pushed = []
        for u in decisions.commit:
            grad, skip = self.pending.pop(u, (None, frozenset()))
            if grad is None:
                continue
            if skip:  # redone after a lost replica's partial push: only the shards that lack it
                self._check(server.accumulate("acc", grad, (u,), frozenset(skip)))
                pushed.append(u)
                self.pushed.add(u)
            else:
                self.acc += grad
                self.unpushed.append(u)
        for u in decisions.discard:
            self.pending.pop(u, None)
        if self.unpushed and len(self.unpushed) >= push_every:
            pushed += self._push(server)
        return pushed

    def _check(self, answers: list[PushAnswer]) -> None:
        refused = [a.reason for a in answers if not a.accepted]
        if refused:
            raise FloatingPointError(f"replica {self.index}: shards refused its gradient: {refused}")

    def _push(self, server) -> list[int]:
        assert self.acc is not None
        self._check(server.accumulate("acc", self.acc, tuple(self.unpushed)))
        self.acc[:] = 0.0
        pushed, self.unpushed = self.unpushed, []
        self.pushed.update(pushed)
        self.pushes += 1
        return pushed
