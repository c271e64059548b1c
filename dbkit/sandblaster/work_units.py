"""Sandblaster's work units: a batch gradient cut into many small pieces.

DistBelief Sec. 4.2: the batch is divided into many more work units than
there are replicas, so fast replicas do more, and slow ones hold nobody up.
A unit's share of the objective is its examples' summed cross-entropy over the
whole batch size; one extra *penalty unit* contributes the L2 term, so the
units together give exactly the full-batch loss and gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..nn import Network

PENALTY = -1


@dataclass(frozen=True)
class WorkUnit:
    """Rows ``[start, stop)`` of the batch; index ``PENALTY`` is the L2 term."""

    index: int
    start: int = 0
    stop: int = 0

    @property
    def size(self) -> int:
        return self.stop - self.start


def make_units(n_examples: int, unit_size: int) -> list[WorkUnit]:
    """Cut ``n_examples`` rows into units of ``unit_size`` (the last may be smaller), plus the penalty unit."""
    if isinstance(unit_size, bool) or not isinstance(unit_size, int) or unit_size < 1:
        raise ValueError(f"work_unit_size must be a whole number >= 1, got {unit_size!r}")
    if n_examples < 1:
        raise ValueError("the batch is empty")
    starts = range(0, n_examples, unit_size)
    return [WorkUnit(i, a, min(a + unit_size, n_examples)) for i, a in enumerate(starts)] + [WorkUnit(PENALTY)]


def default_unit_size(n_examples: int, replicas: int) -> int:
    """Examples per work unit when none is set: about a tenth of one replica's share of the batch, so a
    batch has many more units than replicas (DistBelief Sec. 4.2)."""
    return max(1, n_examples // (10 * replicas))


def unit_gradient(network: Network, params: np.ndarray, X: np.ndarray, y: np.ndarray, unit: WorkUnit,
                  n_total: int) -> tuple[float, np.ndarray]:
    """A unit's part of the batch objective and of its gradient."""
    if unit.index == PENALTY:
        return network.penalty(params), network.penalty_grad(params)
    loss, grad = network.loss_and_grad(params, X[unit.start : unit.stop], y[unit.start : unit.stop],
                                       with_penalty=False)
    share = unit.size / n_total
    grad *= np.float32(share)
    return loss * share, grad


class LocalBatch:
    """Evaluates the batch objective in process, unit by unit (the reference executor).

    ``evaluate(name)`` fetches vector ``name`` from the shards, sums the units'
    gradients, pushing to shard vector ``"acc"`` every ``push_every`` units, and
    returns the loss. The coordinator then reads only scalars from ``"acc"``.
    """

    def __init__(self, network: Network, X: np.ndarray, y: np.ndarray, ops, unit_size: int, push_every: int = 4):
        self.network, self.X, self.y, self.ops = network, X, y, ops
        self.units = make_units(len(y), unit_size)
        self.push_every = push_every
        self.evaluations = 0

    def __call__(self, name: str) -> float:
        self.ops.zero("acc")
        params = self.ops.fetch_vector(name)
        total, pending, count = 0.0, np.zeros_like(params), 0
        for unit in self.units:
            loss, grad = unit_gradient(self.network, params, self.X, self.y, unit, len(self.y))
            total += loss
            pending += grad
            count += 1
            if count % self.push_every == 0:
                self.ops.accumulate("acc", pending)
                pending[:] = 0.0
        if count % self.push_every:
            self.ops.accumulate("acc", pending)
        self.evaluations += 1
        return total
