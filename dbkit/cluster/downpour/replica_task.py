"""Downpour replicas as long-running Dask tasks, steered through a per-worker control actor.

A replica's loop runs as a task that calls ``secede()``, so it never occupies a
worker thread slot and never runs on the actor thread shared by the shards on
that worker (DESIGN.md, Dask facts). The driver changes settings (rates, lr,
pause, stop, step caps) by calling ``ReplicaControl`` methods; the replica reads
the control object *in process* (same worker), so steering costs the replica
nothing per step and takes effect from its next step.
"""

from __future__ import annotations

import time
import traceback

import numpy as np

from ..algorithms import DownpourReplica
from .partition_downpour import DownpourPartition
from .partitioned_downpour import PartitionedDownpourReplica, fail_fast
from .shards import ShardHandles, connect

SETTINGS = ("n_fetch", "n_push", "lr", "paused", "stop", "max_steps")


class ReplicaControl:
    """Settings and live figures of the replicas on one worker (a Dask actor)."""

    def __init__(self) -> None:
        self.settings: dict[int, dict] = {}
        self.figures: dict[int, dict] = {}

    def register(self, index: int, settings: dict) -> None:
        self.settings[index] = {k: settings[k] for k in SETTINGS}

    def set(self, indices: list[int] | None = None, **changes) -> list[int]:
        """Apply ``changes`` to the replicas ``indices`` (all on this worker if None)."""
        unknown = set(changes) - set(SETTINGS)
        if unknown:
            raise ValueError(f"unknown replica settings {sorted(unknown)}")
        targets = list(self.settings) if indices is None else [i for i in indices if i in self.settings]
        for i in targets:
            self.settings[i] = {**self.settings[i], **changes}
        return targets

    def stats(self) -> dict[int, dict]:
        return {i: dict(f) for i, f in self.figures.items()}


def run_replica(index: int, control_key: str, network, X: np.ndarray | None, y: np.ndarray | None,
                shards: ShardHandles | None, batch_size: int, seed: int, poll: float = 0.005,
                partitions: list[tuple[str, str]] | None = None, floats_per_example: int = 0) -> dict:
    """The body of one replica task: step until told to stop; returns final figures.

    ``control_key`` names the ``ReplicaControl`` actor on this worker, read in
    process. Errors (a shard lost, say) end this replica alone: they are
    recorded in the figures (``failures``, ``error``) instead of raised.
    A whole replica trains on ``X, y`` with ``shards``; a partitioned one
    drives the ``DownpourPartition`` actors named by ``partitions``
    (``(key, worker)`` each), which hold their data and shards themselves.
    """
    from distributed import get_worker, secede
    from distributed.actor import Actor
    from threadpoolctl import threadpool_limits

    secede()
    ctl = get_worker().state.actors.get(control_key)
    if ctl is None:
        raise RuntimeError(f"replica {index}: its control actor {control_key} is not on this worker")
    s = ctl.settings[index]
    if partitions:
        parts = [Actor(DownpourPartition, w, k) for k, w in partitions]
        replica = PartitionedDownpourReplica(index, parts, s["n_fetch"], s["n_push"], s["lr"], floats_per_example,
                                             gather=fail_fast(get_worker().loop))
    else:
        replica = DownpourReplica(index, network, X, y, connect(shards), batch_size, s["n_fetch"], s["n_push"],
                                  s["lr"], seed=seed)
    worker = get_worker().address
    figures = {**replica.stats(), "worker": worker, "failures": 0, "error": None, "state": "running"}
    applied = dict(s)
    with threadpool_limits(1):  # one BLAS thread per replica: processes, not BLAS threads, share the cores
        try:
            while True:
                s = ctl.settings[index]
                if s["stop"]:
                    break
                if s is not applied:
                    if (s["n_fetch"], s["n_push"], s["lr"]) != (applied["n_fetch"], applied["n_push"], applied["lr"]):
                        replica.configure(s["n_fetch"], s["n_push"], s["lr"])
                    applied = s
                if s["paused"] or replica.steps >= s["max_steps"]:
                    replica.flush()
                    figures = {**figures, **replica.stats(), "state": "paused"}
                    ctl.figures[index] = figures
                    time.sleep(poll)
                    continue
                replica.step()
                figures = {**figures, **replica.stats(), "state": "running"}
                ctl.figures[index] = figures
            replica.flush()
            figures = {**figures, **replica.stats(), "state": "stopped"}
        except Exception as e:  # noqa: BLE001 - a replica's death must not stop training
            figures = {**figures, **replica.stats(), "state": "failed", "failures": 1,
                       "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=3)}
    ctl.figures[index] = figures
    return figures
