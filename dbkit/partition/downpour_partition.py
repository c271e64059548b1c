"""A partition of a Downpour replica: its data columns, its own shards, its own fetch and push.

DistBelief Sec. 3 and 4.1: a partitioned replica's partitions each exchange
parameters only with the shards that hold their own parameters. Each partition
keeps its columns of the replica's data shard, draws the same mini-batches as
its partners (same seed), fetches its block of parameters, accumulates its
block of the gradient, takes its part of the local step and pushes its block.
The replica's driver (``PartitionedDownpourReplica``) only says, each step,
what the schedule asks for; it never sees parameters or gradients.

Plain numpy and asyncio: the shards (``server``) and the partners are
injected, so the same class runs in one process or as a Dask actor
(``dbkit.partition.actors``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from ..data import MiniBatches
from ..downpour.exchange import Exchange, StepActions
from ..ps import Histogram, ShardedParameters
from ..runtime.run_through import on_event_loop
from ..training.figures import PartitionFigures, ReplicaCounters
from .worker import PartitionWorker


@dataclass(frozen=True)
class PartitionStep:
    """One partition's result of one Downpour step: ``finite`` False if it dropped its gradient."""

    finite: bool
    loss: float | None  # the data loss (partition 0 only)
    penalty: float  # its part of the L2 term
    examples: int
    figures: PartitionFigures

    def to_json(self) -> dict:
        return {"finite": self.finite, "loss": self.loss, "penalty": self.penalty, "examples": self.examples,
                "figures": self.figures.to_json()}

    @classmethod
    def from_json(cls, d: dict) -> PartitionStep:
        return cls(bool(d["finite"]), d["loss"], float(d["penalty"]), int(d["examples"]),
                   PartitionFigures.from_json(d["figures"]))


class DownpourPartition(PartitionWorker):
    """Partition ``index`` of ``ownership.k`` of a Downpour replica; all methods async."""

    server: ShardedParameters
    batches: MiniBatches

    async def attach(self, server: ShardedParameters, shard_ids: list[int], X: np.ndarray, y: np.ndarray,
                     batch_size: int, seed: int, worker: str = "local", overlap: bool = True) -> int:
        """Give this partition its shards (``server``, whose layout covers its own block) and its data:
        ``X`` holds the columns its first layer reads, ``y`` the labels. With ``overlap`` it fetches and
        pushes in the background, as a whole replica does (``Exchange``)."""
        if server.layout.size != self.mine.size:
            raise ValueError(f"partition {self.index} owns {self.mine.size} parameters, its shards hold "
                             f"{server.layout.size}")
        X = np.asarray(X, dtype=np.float32)
        if X.shape[1] != self.narrow[0].reads.size:
            raise ValueError(f"partition {self.index} reads {self.narrow[0].reads.size} input columns, got "
                             f"{X.shape[1]}")
        self.server, self.worker = server, worker
        self.shard_ids = tuple(int(s) for s in shard_ids)
        self.batches = MiniBatches(X, np.asarray(y), batch_size, seed=seed)
        self.counters = ReplicaCounters()
        self.exchange = Exchange(server, int(self.mine.size), overlap, self._took_params, self.counters.answered)
        self._fresh = True  # the next fetch is waited for: a first step, or after a dropped gradient
        return int(self.mine.size)

    async def _exchanging(self, fn, *args):
        """A call on the exchange, which may wait for the shards: on an event loop (an actor) it waits on this
        partition's own thread, which keeps the loop serving; a wired step is on that thread already, and a
        simulated one waits in virtual time."""
        if self.link is not None or not on_event_loop():
            return fn(*args)
        if self.aborted is not None:  # its own thread has ended (``abort``): a last flush waits on the loop's pool
            return await asyncio.to_thread(fn, *args)
        return await asyncio.get_running_loop().run_in_executor(self._thread(), fn, *args)

    def _took_params(self, params: np.ndarray) -> None:
        self.params[:] = params  # in place: the layer parts hold views of it

    async def downpour_step(self, step: int, actions: StepActions, lr: float) -> PartitionStep:
        """One step of this partition, doing what ``actions`` says."""
        c, ex = self.counters, self.exchange
        await self._exchanging(ex.collect)
        if actions.fetch:
            if self._fresh or not ex.overlap:
                await self._exchanging(ex.fetch_now)
            else:
                ex.start_fetch()
                await self._exchanging(ex.collect)
            self._fresh = False
            c.fetches += 1
        X, y = next(self.batches)
        out = await self.run_step(step, X, y)
        grad = out["grad"]
        c.examples += len(y)
        with np.errstate(all="ignore"):
            finite = bool(np.isfinite(np.dot(grad, grad)) and (out["loss"] is None or np.isfinite(out["loss"])))
        if not finite:  # as a whole replica would: drop it, fetch afresh next step
            c.dropped()
            self._fresh = True
        else:
            ex.accrue(grad, len(y), (self.params, lr) if actions.local else None)
            if actions.push and await self._exchanging(ex.push, actions.push_fetch):
                c.fetches += 1
        loss = None if out["loss"] is None else float(out["loss"])
        return PartitionStep(finite, loss, float(out["penalty"]), len(y), self.figures())

    async def flush(self) -> PartitionFigures:
        """Push what this partition accumulated since its last push and wait for everything under way
        (before pausing or stopping)."""
        if self.exchange.examples:
            await self._exchanging(self.exchange.push, False)
        await self._exchanging(self.exchange.flush)
        return self.figures()

    def figures(self) -> PartitionFigures:
        c = self.counters
        return PartitionFigures(
            partition=self.index, worker=self.worker, shards=self.shard_ids, pushes=c.pushes, fetches=c.fetches,
            rejected=c.rejected, nonfinite=c.nonfinite, examples=c.examples,
            bytes_fetched=self.server.bytes_fetched, bytes_pushed=self.server.bytes_pushed,
            bytes_sent=self.bytes_sent, staleness=Histogram.of(c.staleness), age=Histogram.of(c.ages))
