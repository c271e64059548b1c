"""Elastic averaging SGD: replicas keep their own parameters, tied to a centre on the shards by an elastic force.

Zhang, Choromanska and LeCun, "Deep learning with Elastic Averaging SGD",
NIPS 2015, Algorithm 1 (asynchronous EASGD), for replica i with local
parameters ``x`` and the centre ``c`` held by the parameter shards::

    every tau steps:   c_read = c                   (a fetch)
                       d = alpha * (x - c_read)
                       x = x - d                    (the replica is pulled towards the centre)
                       c = c + d                    (the centre towards the replica: a push)
    every step:        x = x - lr * grad(x_before)  (the gradient at x before the pull)

Unlike Downpour's (Sec. 4.1), a replica never takes the shards' parameters as
its own: it explores, and only the elastic difference travels. The shards
apply ``c = c - alpha * (c_read - x)``: plain SGD at the rate ``alpha`` on the
pushed ``c_read - x``, so this loop asks for ``optimizer="sgd"``. Between a
replica's fetch and its push other replicas may move the centre, as in the
paper's asynchronous version.

With ``alpha = 1`` the paper's symmetric update swaps the two: the replica
takes the centre and the centre the replica's parameters before the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..downpour.replica import DownpourReplica
from ..downpour.replica_kinds import register_replica
from ..settings import Knobs, knob


@dataclass(frozen=True)
class EASGDKnobs(Knobs):
    tau: int = knob(4, "int", 1, 100_000, help="EASGD: steps between two elastic exchanges with the centre")
    alpha: float = knob(0.1, "float", 0.0, 1.0, lo_open=True,
                        help="EASGD: the moving rate, how far the replica and the centre move towards each other")


@register_replica
class EASGDReplica(DownpourReplica):
    """EASGD (Zhang et al. 2015): local SGD, and every tau steps an elastic exchange of alpha (x - centre)."""

    name: ClassVar[str] = "easgd"
    Knobs = EASGDKnobs
    knob: EASGDKnobs
    shard_rate: ClassVar[str | None] = "alpha"
    optimizers: ClassVar[tuple[str, ...] | None] = ("sgd",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.centre: np.ndarray | None = None  # the centre as last fetched
        self.t = 0  # this replica's steps (the paper's t^i)
        self.examples_since = 0

    def took_params(self, params: np.ndarray) -> None:
        self.centre = params  # a fetch brings the centre; the replica keeps its own parameters

    def step(self) -> float:
        ex = self.exchange
        ex.collect()
        if self.params is None:  # x^i = c at the start (and after a dropped gradient)
            ex.fetch_now()
            self.counters.fetches += 1
            assert self.centre is not None
            self.params = self.centre.copy()
        x = self.params
        X, y = next(self.batches)
        loss, grad, finite = self.gradient(x, X, y)  # at x before the elastic pull
        if not finite:
            self.counters.dropped()
            self.params = None
            return float("nan")
        if self.t % self.knob.tau == 0:
            self.pull_and_push(x)
        x -= np.float32(self.lr) * grad
        self.t += 1
        self.counters.stepped(float(loss), len(y))
        self.examples_since += len(y)
        return float(loss)

    def pull_and_push(self, x: np.ndarray) -> None:
        """The elastic exchange: fetch the centre, pull ``x`` towards it, push ``centre - x`` (the shards move
        the centre by ``alpha`` times it, towards ``x`` as it was)."""
        ex = self.exchange
        ex.fetch_now()
        self.counters.fetches += 1
        assert self.centre is not None
        towards_x = self.centre - x
        ex.accrue(towards_x, self.examples_since)
        self.examples_since = 0
        x += np.float32(self.knob.alpha) * towards_x  # x - alpha (x - c)
        ex.push(and_fetch=False)
