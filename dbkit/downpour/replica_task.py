"""Downpour replicas as long-running tasks, steered through a control actor on their worker (Dask or in process).

A replica's loop (``dbkit.downpour.replica_loop.run_replica_loop``) runs as a task that
leaves its worker's task slot (Dask's ``secede()``), so it never occupies a worker thread slot and never runs
on the actor thread shared by the shards on that worker (DESIGN.md, Dask
facts). The driver changes a replica's ``ReplicaSettings`` by calling
``ReplicaControl`` methods; the replica reads the control object *in process*
(same worker), so steering costs the replica nothing per step.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..partition.actors import PartitionActor
from ..partition.replica import PartitionedDownpourReplica
from ..runtime.protocol import TaskSide
from ..runtime.shards import ShardHandles, connect
from ..training.figures import ReplicaFigures, ReplicaSettings
from .coordinators import CoordinatorEnd
from .replica import DownpourReplica
from .replica_kinds import replica_class
from .replica_loop import run_replica_loop


class ReplicaControl:
    """Settings and latest figures of the replicas on one worker (an actor).

    A replica reads its settings with the steps it has taken (``read``), and a step its cap allows counts
    as begun there, under the control's lock: a cap is never set below the steps its replica has begun, and
    ``cap_each`` answers with the caps it set, so a driver sharing a budget of steps knows each cap in force
    exactly (``dbkit.downpour.step_grants``).
    """

    def __init__(self) -> None:
        self.settings: dict[int, ReplicaSettings] = {}
        self.figures: dict[int, ReplicaFigures] = {}
        # lock order: leaf (each replica's settings and the steps it has begun, read by it, changed by the driver)
        self._lock = threading.Lock()
        self._begun: dict[int, int] = {}  # replica -> the steps it has taken or begun

    def register(self, index: int, settings: ReplicaSettings) -> None:
        with self._lock:
            self.settings[index], self._begun[index] = settings, 0

    def read(self, index: int, steps: int) -> ReplicaSettings:
        """Replica ``index``'s settings, read before its next step (it has taken ``steps``): if they let it
        step, that step counts as begun, and no cap set from now on is below it."""
        with self._lock:
            s = self.settings[index]
            if not s.paused and steps < s.max_steps:
                self._begun[index] = max(self._begun.get(index, 0), steps + 1)
            return s

    def set(self, indices: list[int] | None = None, **changes: Any) -> list[int]:
        """Apply ``changes`` (fields of ``ReplicaSettings``) to replicas ``indices`` (all here if None)."""
        with self._lock:
            targets = list(self.settings) if indices is None else [i for i in indices if i in self.settings]
            for i in targets:
                self.settings[i] = self._changed(i, changes)
            return targets

    def set_each(self, changes: dict[int, dict[str, Any]], epoch: int) -> list[int]:
        """Apply each replica's own ``changes[index]`` (those on this worker) at ``epoch``."""
        with self._lock:
            targets = [i for i in changes if i in self.settings]
            for i in targets:
                self.settings[i] = self._changed(i, {**changes[i], "epoch": epoch})
            return targets

    def cap_each(self, caps: dict[int, int], epoch: int) -> dict[int, int]:
        """Cap each replica of ``caps`` on this worker at its steps there (never below the steps it has
        begun), at ``epoch``; returns the caps set."""
        with self._lock:
            for i in (i for i in caps if i in self.settings):
                self.settings[i] = self._changed(i, {"max_steps": caps[i], "epoch": epoch})
            return {i: self.settings[i].max_steps for i in caps if i in self.settings}

    def _changed(self, index: int, changes: dict[str, Any]) -> ReplicaSettings:
        if "max_steps" in changes:  # (a step begun is taken: a cap below it would not hold it)
            changes = {**changes, "max_steps": max(int(changes["max_steps"]), self._begun.get(index, 0))}
        return self.settings[index].but(**changes)

    def ping(self) -> int:
        """The driver's heartbeat: answered at once (a hung machine answers nothing)."""
        return 0

    def latest(self) -> dict[int, ReplicaFigures]:
        return dict(self.figures)


def run_replica(side: TaskSide, index: int, control_key: str, network: Any, X: np.ndarray | None, y: np.ndarray | None,
                shards: ShardHandles | None, batch_size: int, seed: int, max_nonfinite: int,
                partitions: list[tuple[str, str]] | None = None, floats_per_example: int = 0,
                overlap: bool = True, wired: bool = False, loop: str | type[DownpourReplica] = "downpour",
                knobs: dict[str, Any] | None = None, coordinator: tuple[str, str, type] | None = None
                ) -> ReplicaFigures:
    """The body of one replica task: run its loop until told to stop; returns its final figures.

    A whole replica trains on ``X, y`` with ``shards``; a partitioned one drives
    the partition actors named by ``partitions`` (``(key, worker)`` each), which
    hold their data and shards themselves: ``wired`` ones through its partition 0,
    on this worker, with one message to each partner per step. A whole replica runs the replica loop
    ``loop`` (a class, sent by value if it was defined in a notebook, or its registered name:
    ``dbkit.downpour.replica_kinds``) with its ``knobs`` and its end of the ``coordinator`` its loop names
    (``(key, worker, class)``: ``dbkit.downpour.coordinators``).
    """
    side.leave_slot()
    ctl = side.local(control_key)
    if ctl is None:
        raise RuntimeError(f"replica {index}: its control actor {control_key} is not on this worker")
    s = ctl.settings[index]
    replica: DownpourReplica | PartitionedDownpourReplica
    server = None
    if partitions:
        parts = [side.remote(PartitionActor, w, k) for k, w in partitions]
        lead = side.local(partitions[0][0]) if wired else None
        if wired and lead is None:
            raise RuntimeError(f"replica {index}: its partition 0 {partitions[0][0]} is not on this worker")
        replica = PartitionedDownpourReplica(index, parts, s.n_fetch, s.n_push, s.lr, floats_per_example,
                                             gather=side.gather, max_nonfinite=max_nonfinite, lead=lead)
    else:
        assert X is not None and y is not None and shards is not None
        server = connect(shards, side, name=f"replica{index}", threaded=overlap)
        cls = replica_class(loop) if isinstance(loop, str) else loop
        co = None
        if coordinator is not None:
            key, where, kind = coordinator
            co = CoordinatorEnd(side.local(key) or side.remote(kind, where, key))
        replica = cls(index, side.computing(network), X, y, server, batch_size, s.n_fetch, s.n_push, s.lr,
                      seed=seed, max_nonfinite=max_nonfinite, overlap=overlap, coordinator=co, **(knobs or {}))
        replica.clock = side.time  # a loop that waits for others waits in its runtime's time

    def publish(figures: ReplicaFigures) -> None:
        ctl.figures[index] = figures

    try:
        with side.one_blas_thread():
            settings = side.while_alive(lambda: ctl.read(index, replica.counters.steps))
            return run_replica_loop(replica, settings, publish, worker=side.address, clock=side.time)
    finally:
        if server is not None:
            server.close()  # its wire connections (after the answers to what it pushed)
