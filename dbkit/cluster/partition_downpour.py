"""A partition of a Downpour replica: its data columns, its own shards, its own fetch and push.

DistBelief Sec. 3 and 4.1: a partitioned replica's partitions each exchange
parameters only with the shards that hold their own parameters. Each partition
keeps its columns of the replica's data shard, draws the same mini-batches as
its partners (same seed), fetches its block of parameters, accumulates its
block of the gradient, takes its part of the local step and pushes its block.
The replica's driver only says, each step, what the schedule asks for
(``dbkit.algorithms.schedule``); it never sees parameters or gradients.
"""

from __future__ import annotations

import numpy as np

from ..data import MiniBatches
from ..ps import ParameterShard, ShardedParameters, ShardLayout
from .partition_actor import PartitionWorker


class DownpourPartition(PartitionWorker):
    """Partition ``index`` of ``k`` of a Downpour replica (a Dask actor; all methods async)."""

    async def attach(self, keys: list[str], workers: list[str], layout: ShardLayout, shard_ids: list[int],
                     X: np.ndarray, y: np.ndarray, batch_size: int, seed: int, name: str) -> int:
        """Give this partition its shards (``keys`` on ``workers``, ``layout`` over its own block)
        and its data: ``X`` holds the columns its first layer reads, ``y`` the labels."""
        from distributed import get_worker
        from distributed.actor import Actor

        if layout.size != self.mine.size:
            raise ValueError(f"partition {self.index} owns {self.mine.size} parameters, its shards hold {layout.size}")
        self.worker = get_worker().address
        local = get_worker().state.actors  # shards on this worker are called in process
        shards = [local.get(k) or Actor(ParameterShard, w, k) for k, w in zip(keys, workers)]
        self.server = ShardedParameters(shards, layout, workers=workers, name=name)
        self.shard_ids = [int(s) for s in shard_ids]
        X = np.asarray(X, dtype=np.float32)
        if X.shape[1] != self.narrow[0].reads.size:
            raise ValueError(f"partition {self.index} reads {self.narrow[0].reads.size} input columns, got "
                             f"{X.shape[1]}")
        self.batches = MiniBatches(X, np.asarray(y), batch_size, seed=seed)
        self.accrued = np.zeros(self.mine.size, dtype=np.float32)
        self.since_push = self.pushes = self.fetches = self.rejected = self.nonfinite = self.examples = 0
        return int(self.mine.size)

    async def downpour_step(self, step: int, fetch: bool, local: bool, push: bool, push_fetch: bool,
                            lr: float) -> dict:
        """One step of this partition (see ``dbkit.algorithms.schedule.StepPlan`` for the flags).

        Returns ``finite`` (False: this partition dropped its gradient), its
        part of the loss, and its figures.
        """
        if fetch:
            self.params[:] = await self.server.afetch()
            self.fetches += 1
        X, y = next(self.batches)
        out = await self.run_step(step, X, y)
        grad = out["grad"]
        self.examples += len(y)
        with np.errstate(all="ignore"):
            finite = bool(np.isfinite(np.dot(grad, grad)) and (out["loss"] is None or np.isfinite(out["loss"])))
        if not finite:  # as a whole replica would: drop it, fetch afresh next step
            self.nonfinite += 1
        else:
            self.accrued += grad
            self.since_push += 1
            if local:
                self.params -= np.float32(lr) * grad
            if push:
                await self._push(push_fetch)
        return {"finite": finite, "loss": out["loss"], "penalty": out["penalty"], "examples": len(y),
                "figures": self.figures()}

    async def _push(self, and_fetch: bool) -> None:
        if and_fetch:
            answers, self.params[:] = await self.server.apush_fetch(self.accrued)
            self.fetches += 1
        else:
            answers = await self.server.apush(self.accrued)
        self.rejected += sum(1 for a in answers if not a["accepted"])
        self.pushes += 1
        self.accrued[:] = 0.0
        self.since_push = 0

    async def flush(self) -> dict:
        """Push what this partition accumulated since its last push (before pausing or stopping)."""
        if self.since_push:
            await self._push(False)
        return self.figures()

    def figures(self) -> dict:
        return {"partition": self.index, "worker": self.worker, "shards": self.shard_ids, "pushes": self.pushes, "fetches": self.fetches,
                "rejected": self.rejected, "nonfinite": self.nonfinite, "examples": self.examples,
                "bytes_fetched": self.server.bytes_fetched, "bytes_pushed": self.server.bytes_pushed,
                "bytes_sent": self.bytes_sent}
