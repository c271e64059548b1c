"""A change to a running Sandblaster job, made between batches (DistBelief Sec. 4.2): backups and balancing,
the replicas (new state actors, or retired ones), the work units' size, stragglers; and what a finished
batch says in the event stream."""

from __future__ import annotations

from typing import Any

from ..config import RunConfig
from ..telemetry import BatchDone, EventStream, ReplicaEvent
from .batch import UnitBatch
from .dispatcher import UnitDispatcher
from .replica_actors import ReplicaActors
from .work_units import default_unit_size


def check_change(old: RunConfig, new: RunConfig, batch: UnitBatch | None) -> None:
    """Refuse fewer replicas than would leave one live (``ValueError``)."""
    if new.replicas < old.replicas and batch is not None:
        live = len(batch.dispatcher.live())
        if live - (old.replicas - new.replicas) < 1:
            raise ValueError(f"replicas must leave at least one live replica ({live} live now)")


def apply_change(changes: dict[str, Any], new: RunConfig, batch: UnitBatch, replicas: ReplicaActors | None,
                 n_train: int) -> None:
    """Apply validated ``changes`` (``new``: the config after them) between ``batch``'s batches (it holds
    its lock for a whole batch)."""
    with batch.lock:
        d, s = batch.dispatcher, new.sandblaster
        d.between_batches(backup=s.backup, balance=s.balance)
        if "replicas" in changes and replicas is not None:
            replicas.resize(batch, new.replicas, dict(new.slow_replicas))
        if "work_unit_size" in changes or "replicas" in changes:
            batch.set_unit_size(s.work_unit_size or default_unit_size(n_train, new.replicas))
        if "slow_replicas" in changes and replicas is not None:
            replicas.set_slow(d.live(), dict(new.slow_replicas))


def batch_done(events: EventStream, d: UnitDispatcher, seconds: float) -> None:
    """Say that ``d``'s batch is done (``BatchDone``: its loss, seconds and units' timeline), after a
    ``ReplicaEvent`` for each replica lost during it."""
    lost = tuple(x for x in d.lost if x.batch == d.batch)
    for x in lost:
        events.emit(ReplicaEvent, replica=x.replica, what="lost", reason=x.reason,
                    worker=next((s.worker for s in d.slots if s.index == x.replica), ""))
    events.emit(BatchDone, batch=d.batch, seconds=seconds, loss=d.loss, units=d.timeline(), lost=lost)
