"""One Sandblaster replica's state between work units (DistBelief Sec. 4.2).

A replica fetches the batch's parameters once (at its first unit of the
batch), keeps each finished unit's gradient until the coordinator says whether
its copy won (``commit``) or lost to a backup (``discard``), and pushes the sum
of committed gradients to the shards every ``push_every`` units. Decisions
travel with the replica's next assignment, so no extra messages are needed.

Plain numpy with a lock: on Dask the object is an actor that the unit tasks
pinned to its worker use in process (``dbkit.sandblaster.tasks``).
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

import numpy as np

from ..nn import Network
from ..ps import PushAnswer
from ..runtime.clock import REAL_TIME, Clock
from .records import Assignment, Decisions, UnitResult
from .work_units import unit_gradient

MIN_UNIT_SECONDS = 0.01  # a slowed replica is slowed relative to at least this much work per unit


@dataclass(frozen=True)
class SandblasterReplicaFigures:
    replica: int
    units: int
    pushes: int
    fetches: int
    slow_factor: float


@dataclass
class BatchState:
    """What one replica holds of batch ``number``: the parameters fetched for it, the committed gradient
    not yet pushed (``acc``, the units in it ``unpushed``), finished units awaiting a decision
    (``pending``: unit -> gradient and the shards to skip) and every unit it pushed. ``lock`` guards it,
    shard calls included."""

    number: int
    lock: AbstractContextManager
    params: np.ndarray | None = None
    acc: np.ndarray | None = None
    pending: dict[int, tuple[np.ndarray, frozenset[int]]] = field(default_factory=dict)
    unpushed: list[int] = field(default_factory=list)
    pushed: set[int] = field(default_factory=set)


class SandblasterReplica:
    """State of replica ``index``; ``slow_factor`` > 1 makes each unit take that many times longer.

    Each batch has its own ``BatchState`` and lock (``clock.lock()`` of the task that begins it: a thread
    lock, or on a simulated machine one that waits in virtual time): a unit of an abandoned batch, stuck on a shard
    whose machine hung until its call times out, holds only its own batch's lock, never the next
    batch's units (issue #21: it once held a restored run's replica for a minute). A unit or flush of a
    batch older than the newest seen is stale and touches nothing.
    """

    def __init__(self, index: int, slow_factor: float = 1.0) -> None:
        self.index = index
        self.slow_factor = float(slow_factor)
        # lock order: leaf
        self._guard = threading.Lock()  # the current batch and the counters: held for no call, no wait
        self.current: BatchState | None = None
        self.units = self.pushes = self.fetches = 0

    def set_slow(self, factor: float) -> float:
        self.slow_factor = float(factor)
        return self.slow_factor

    def figures(self) -> SandblasterReplicaFigures:
        return SandblasterReplicaFigures(self.index, self.units, self.pushes, self.fetches, self.slow_factor)

    def batch_state(self, number: int, clock: Clock = REAL_TIME) -> BatchState | None:
        """Batch ``number``'s state, new if it is newer than any seen; ``None`` if it is older (stale)."""
        with self._guard:
            b = self.current
            if b is None or number > b.number:
                b = self.current = BatchState(number, clock.lock())
            return b if b.number == number else None

    def _count(self, units: int = 0, pushes: int = 0, fetches: int = 0) -> None:
        with self._guard:
            self.units, self.pushes, self.fetches = self.units + units, self.pushes + pushes, self.fetches + fetches

    def run_unit(self, server, network: Network, X: np.ndarray, y: np.ndarray, job: Assignment, n_total: int,
                 vector: str, push_every: int, clock: Clock = REAL_TIME) -> UnitResult:
        """Apply ``job.decisions``, compute ``job.unit`` at shard vector ``vector``; returns its share of the loss
        (NaN, computing nothing, for a unit of a batch older than the newest this replica has seen). A slowed
        replica waits (factor - 1) times the unit's seconds on ``clock`` (its task's: virtual on a simulated
        machine), at least ``MIN_UNIT_SECONDS``."""
        b = self.batch_state(job.batch, clock)
        if b is None:
            return UnitResult(job.unit.index, job.batch, float("nan"), ())
        with b.lock:
            if b.params is None:  # first unit of the batch: fetch the parameters once
                b.params = server.fetch_vector(vector)
                b.acc = np.zeros_like(b.params)
                self._count(fetches=1)
            pushed = self._apply(b, job.decisions, server, push_every)
            params = b.params
        t0 = clock.now()
        loss, grad = unit_gradient(network, params, X, y, job.unit, n_total)
        if self.slow_factor > 1:
            clock.sleep((self.slow_factor - 1) * max(clock.now() - t0, MIN_UNIT_SECONDS))
        with b.lock:  # the batch's own state: a straggler from an old batch cannot leak into a newer one
            b.pending[job.unit.index] = (grad, job.skip)
        self._count(units=1)
        return UnitResult(job.unit.index, job.batch, float(loss), tuple(pushed))

    def flush(self, server, batch: int, decisions: Decisions, clock: Clock = REAL_TIME) -> list[int]:
        """End of batch: apply the last decisions, push whatever was committed, and return every
        unit of this batch this replica has pushed, by this call or by a unit task (whose result
        the coordinator may not have read yet).

        Gradients still awaiting a decision are kept: a unit task that finished just before this
        flush ran has stored its gradient, but the coordinator reads its result only afterwards, and
        if the batch goes on (a replica was lost meanwhile) it commits that unit with the next flush.
        (Clearing them here once lost such a unit and with it a live replica, in a CI run.) The next
        batch's state replaces this one, and them with it."""
        b = self.batch_state(batch, clock)
        if b is None:
            return []
        with b.lock:
            self._apply(b, decisions, server, push_every=10**9)
            if b.unpushed:
                self._push(b, server)
            return sorted(b.pushed)

    def _apply(self, b: BatchState, decisions: Decisions, server, push_every: int) -> list[int]:
        """Commit or discard finished units of ``b``; push committed gradients if enough have gathered."""
        pushed = []
        for u in decisions.commit:
            grad, skip = b.pending.pop(u, (None, frozenset()))
            if grad is None:
                continue
            if skip:  # redone after a lost replica's partial push: only the shards that lack it
                self._check(server.accumulate("acc", grad, (u,), frozenset(skip)))
                pushed.append(u)
                b.pushed.add(u)
            else:  # a pending unit was computed on fetched parameters: ``acc`` is there
                assert b.acc is not None
                b.acc += grad
                b.unpushed.append(u)
        for u in decisions.discard:
            b.pending.pop(u, None)
        if b.unpushed and len(b.unpushed) >= push_every:
            pushed += self._push(b, server)
        return pushed

    def _check(self, answers: list[PushAnswer]) -> None:
        refused = [a.reason for a in answers if not a.accepted]
        if refused:
            raise FloatingPointError(f"replica {self.index}: shards refused its gradient: {refused}")

    def _push(self, b: BatchState, server) -> list[int]:
        assert b.acc is not None
        self._check(server.accumulate("acc", b.acc, tuple(b.unpushed)))
        b.acc[:] = 0.0
        pushed, b.unpushed = b.unpushed, []
        b.pushed.update(pushed)
        self._count(pushes=1)
        return pushed
