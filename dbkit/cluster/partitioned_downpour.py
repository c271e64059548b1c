"""A Downpour replica made of K partitions (DistBelief Sec. 3 inside Sec. 4.1).

``PartitionedDownpourReplica`` has the interface of
``dbkit.algorithms.DownpourReplica`` (``step``, ``flush``, ``configure``,
``stats``), so the same replica task runs either. It holds the replica's
schedule and, each step, tells its ``DownpourPartition`` actors what to do;
the partitions fetch, compute, exchange boundary activations, and push, each
with its own shards.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..algorithms.schedule import Rates
from ..ps import resolve


class PartitionedDownpourReplica(Rates):
    """Replica ``index`` driving ``parts`` (actor proxies of ``DownpourPartition``, in partition order).

    ``floats_per_example`` is what the connectivity requires to cross
    partition boundaries per example, forward and backward
    (``dbkit.partition.boundary_floats``); the measured bytes are reported next to it.
    ``gather(calls)`` turns the partitions' pending calls into results; on
    Dask, ``fail_fast(loop)`` raises as soon as any call fails, so a replica
    whose partition died ends at once instead of waiting on its partners.
    """

    def __init__(self, index: int, parts: list, n_fetch: int, n_push: int, lr: float,
                 floats_per_example: int, gather=None) -> None:
        self._init_rates(n_fetch, n_push, lr)
        self.index, self.parts = index, list(parts)
        self.floats_per_example = int(floats_per_example)
        self.steps = self.examples = self.nonfinite = self.run_examples = 0
        self._step = 0
        self.losses: deque[float] = deque(maxlen=50)
        self.part_figures: list[dict] = [{} for _ in self.parts]
        self.gather = gather or (lambda calls: [resolve(c) for c in calls])

    def step(self) -> float:
        """One step of every partition, in lockstep; returns the mini-batch loss."""
        plan = self.schedule.plan()
        self._step += 1
        calls = [p.downpour_step(self._step, plan.fetch, plan.local, plan.push, plan.push_fetch, self.lr)
                 for p in self.parts]
        results = self.gather(calls)
        self.part_figures = [r["figures"] for r in results]
        self.run_examples += results[0]["examples"]
        if not all(r["finite"] for r in results):
            self.nonfinite += 1
            self.schedule.dropped()
            return float("nan")
        self.schedule.done(plan)
        loss = float(sum((r["loss"] or 0.0) + r["penalty"] for r in results))
        self.steps += 1
        self.examples += results[0]["examples"]
        self.losses.append(loss)
        return loss

    def flush(self) -> None:
        if self.schedule.since_push:
            self.part_figures = self.gather([p.flush() for p in self.parts])
            self.schedule.flushed()

    def stats(self) -> dict:
        parts = self.part_figures
        first = parts[0] if parts else {}
        return {
            "replica": self.index, "steps": self.steps, "examples": self.examples,
            "pushes": first.get("pushes", 0), "fetches": first.get("fetches", 0),
            "rejected": sum(f.get("rejected", 0) for f in parts), "nonfinite": self.nonfinite,
            "n_fetch": self.n_fetch, "n_push": self.n_push, "lr": self.lr,
            "loss": float(np.mean(self.losses)) if self.losses else None,
            "bytes_fetched": sum(f.get("bytes_fetched", 0) for f in parts),
            "bytes_pushed": sum(f.get("bytes_pushed", 0) for f in parts),
            "bytes_between_partitions": sum(f.get("bytes_sent", 0) for f in parts),
            "bytes_between_partitions_min": 4 * self.floats_per_example * self.run_examples,
            "partitions": [dict(f) for f in parts],
        }


def fail_fast(loop):
    """A ``gather`` for actor calls made from a task: all results, or the first error at once."""
    import asyncio

    from distributed.utils import sync

    async def wait(call):
        return await call

    def gather(calls: list) -> list:
        async def run():
            tasks = [asyncio.ensure_future(wait(c)) for c in calls]
            try:
                return await asyncio.gather(*tasks)
            except BaseException:
                for t in tasks:
                    t.cancel()
                raise

        return sync(loop, run)

    return gather
