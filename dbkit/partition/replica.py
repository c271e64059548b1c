"""A Downpour replica made of K partitions (DistBelief Sec. 3 inside Sec. 4.1).

``PartitionedDownpourReplica`` has the interface of ``DownpourReplica``
(``step``, ``flush``, ``configure``, ``figures``, ``diverged``), so the same
replica loop runs either. It holds the replica's schedule and, each step,
tells its ``DownpourPartition`` s what to do; the partitions fetch, compute,
exchange boundary activations, and push, each with its own shards.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..downpour.exchange import Schedule
from ..ps import Histogram, resolve
from ..training.figures import PartitionFigures, ReplicaCounters, ReplicaFigures
from .downpour_partition import DownpourPartition, PartitionStep
from .lead import lead


def gather_in_turn(calls: list) -> list:
    """Results of pending calls, one after the other (plain values or futures)."""
    return [resolve(c) for c in calls]


class PartitionedDownpourReplica:
    """Replica ``index`` driving ``parts`` (``DownpourPartition`` s or actor proxies of them, in partition order).

    ``floats_per_example`` is what the connectivity requires to cross
    partition boundaries per example, forward and backward
    (``dbkit.partition.boundary_floats``); the measured bytes are reported next to it.
    ``gather(calls)`` turns the partitions' pending calls into results; on
    Dask, a fail-fast gather raises as soon as any call fails, so a replica
    whose partition died ends at once instead of waiting on its partners.
    With ``lead`` (a wired partition 0 in this process, ``PartitionWorker.wire_up``)
    each step is one order from it to each partner (``dbkit.partition.lead``)
    instead of a call to each partition.
    """

    def __init__(self, index: int, parts: list, n_fetch: int, n_push: int, lr: float, floats_per_example: int,
                 gather: Callable[[list], list[Any]] = gather_in_turn, max_nonfinite: int = 20,
                 lead: DownpourPartition | None = None) -> None:
        self.index, self.parts, self.lead = index, list(parts), lead
        self.schedule = Schedule(n_fetch, n_push, lr)
        self.floats_per_example = int(floats_per_example)
        self.counters = ReplicaCounters(max_nonfinite)
        self.run_examples = 0  # examples through the network, kept gradients or not (for the traffic minimum)
        self._step = 0
        self.part_figures: list[PartitionFigures] = [PartitionFigures(j) for j in range(len(self.parts))]
        self.gather = gather

    @property
    def diverged(self) -> bool:
        return self.counters.diverged

    @property
    def lr(self) -> float:
        return self.schedule.lr

    def configure(self, n_fetch: int, n_push: int, lr: float) -> None:
        """New rates and learning rate from the next step on; all are checked before any changes."""
        self.schedule.configure(n_fetch, n_push, lr)

    def step(self) -> float:
        """One step of every partition, in lockstep; returns the mini-batch loss (NaN if dropped)."""
        actions = self.schedule.next_step()
        self._step += 1
        if self.lead is not None:
            orders = {"actions": [actions.fetch, actions.local, actions.push, actions.push_fetch], "lr": self.lr}
            results = [PartitionStep.from_json(meta) for meta, _ in lead(self.lead, self._step, "step", orders)]
        else:
            results = self.gather([p.downpour_step(self._step, actions, self.lr) for p in self.parts])
        self.part_figures = [r.figures for r in results]
        self.run_examples += results[0].examples
        if not all(r.finite for r in results):
            self.counters.dropped()
            self.schedule.dropped()
            return float("nan")
        self.schedule.done(actions)
        loss = float(sum((r.loss or 0.0) + r.penalty for r in results))
        self.counters.stepped(loss, results[0].examples)
        return loss

    def flush(self) -> None:
        """Every partition pushes what it accumulated and waits for what it has under way (a push started
        in the background may not have been answered yet, even right after a push step)."""
        if self.lead is not None:
            answers = lead(self.lead, self._step, "flush", {})
            self.part_figures = [PartitionFigures.from_json(meta["figures"]) for meta, _ in answers]
        else:
            self.part_figures = self.gather([p.flush() for p in self.parts])
        self.schedule.flushed()

    def figures(self) -> ReplicaFigures:
        parts, c = self.part_figures, self.counters
        first = parts[0]
        return c.figures(
            self.index, n_fetch=self.schedule.n_fetch, n_push=self.schedule.n_push, lr=self.lr,
            bytes_fetched=sum(f.bytes_fetched for f in parts), bytes_pushed=sum(f.bytes_pushed for f in parts),
            bytes_between_partitions=sum(f.bytes_sent for f in parts),
            bytes_between_partitions_min=4 * self.floats_per_example * self.run_examples,
            partitions=tuple(parts)).but(
            pushes=first.pushes, fetches=first.fetches, rejected=sum(f.rejected for f in parts),
            staleness=Histogram.total(f.staleness for f in parts), age=Histogram.total(f.age for f in parts))
