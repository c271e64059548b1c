"""DiLoCo: local steps with AdamW, the parameter delta pushed as an outer gradient, Nesterov on the shards.

Douillard et al., "DiLoCo: Distributed Low-Communication Training of
Language Models", 2023, Algorithm 1. Each replica fetches the parameters
``theta``, takes ``H`` inner steps of AdamW on its own data (``inner_steps``),
and pushes ``delta = theta - theta_after`` as the outer gradient; the shards
apply it with Nesterov momentum at the outer rate (``outer_lr``) and the
replica starts its next round from what they hold. It is Downpour (Sec. 4.1)
with ``n_fetch = n_push = H``, AdamW instead of plain local steps, and a
momentum rule on the shards.

DiLoCo averages the deltas of all replicas before one outer step; here, as in
the parameter server it runs on, each replica's delta is applied as it
arrives (the asynchronous variant), so with R replicas an outer rate of
``outer_lr / R`` matches the average's step size. With ``H = 1``, SGD inside
and outer SGD at rate 1 a round is one SGD step: the test's reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..downpour.replica import DownpourReplica
from ..downpour.replica_kinds import register_replica
from ..ps.update_rule import UpdateRule, register_rule
from ..settings import Knobs, knob


@register_rule
@dataclass(frozen=True)
class NesterovMomentum(UpdateRule):
    """Nesterov momentum (Sutskever et al. 2013), DiLoCo's outer rule: v = mu v + g; p -= lr (g + mu v)."""

    name: ClassVar[str] = "nesterov"
    keeps_state: ClassVar[bool] = True
    momentum: float = knob(0.9, "float", 0.0, 0.9999, help="Nesterov: the momentum mu kept on the shards")

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None, staleness: int = 0) -> None:
        assert state is not None
        mu = np.float32(self.momentum)
        state *= mu
        state += grad  # v = mu v + g
        params -= np.float32(self.lr) * (grad + mu * state)


@dataclass(frozen=True)
class DiLoCoKnobs(Knobs):
    inner_steps: int = knob(8, "int", 1, 100_000, help="DiLoCo: H, the inner steps between two outer steps")
    outer_lr: float = knob(0.7, "float", 0.0, 100.0, lo_open=True,
                           help="DiLoCo: the rate the shards apply the outer gradient with (its lr is the inner rate)")
    inner_optimizer: str = knob("adamw", "choice", choices=("adamw", "sgd"), help="DiLoCo: the replica's inner steps")
    weight_decay: float = knob(0.0, "float", 0.0, 1.0, help="DiLoCo: AdamW's decoupled weight decay")


@register_replica
class DiLoCoReplica(DownpourReplica):
    """DiLoCo (Douillard et al. 2023): H inner AdamW steps, then the parameter delta pushed as an outer gradient."""

    name: ClassVar[str] = "diloco"
    Knobs = DiLoCoKnobs
    knob: DiLoCoKnobs
    shard_rate: ClassVar[str | None] = "outer_lr"
    betas = (0.9, 0.999)
    eps = 1e-8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.start: np.ndarray | None = None  # the parameters this round started from (theta)
        self.inner_done = self.round_examples = 0
        self.m = np.zeros(self.network.size, dtype=np.float32)  # AdamW's moments, kept across rounds
        self.v = np.zeros(self.network.size, dtype=np.float32)
        self.t = 0

    def step(self) -> float:
        """One inner step; the last of a round pushes its delta and waits for the shards' new parameters."""
        ex = self.exchange
        ex.collect()
        if self.start is None:  # a round starts from the shards' parameters
            ex.fetch_now()
            self.counters.fetches += 1
            assert self.params is not None
            self.start = self.params.copy()
        assert self.params is not None
        X, y = next(self.batches)
        loss, grad, finite = self.gradient(self.params, X, y)
        if not finite:  # drop the round: the next step starts again from the shards
            self.counters.dropped()
            self.start, self.inner_done, self.round_examples = None, 0, 0
            return float("nan")
        self.inner_step(self.params, grad)
        self.counters.stepped(float(loss), len(y))
        self.inner_done += 1
        self.round_examples += len(y)
        if self.inner_done >= self.knob.inner_steps:
            self.push_round(fetch=True)
        return float(loss)

    def inner_step(self, params: np.ndarray, grad: np.ndarray) -> None:
        """AdamW (Loshchilov and Hutter 2019) at the replica's lr, or plain SGD (``inner_optimizer``)."""
        lr = np.float32(self.lr)
        if self.knob.inner_optimizer == "sgd":
            params -= lr * grad
            return
        b1, b2 = self.betas
        self.t += 1
        self.m *= np.float32(b1)
        self.m += np.float32(1 - b1) * grad
        self.v *= np.float32(b2)
        self.v += np.float32(1 - b2) * grad * grad
        m_hat = self.m / np.float32(1 - b1**self.t)
        v_hat = self.v / np.float32(1 - b2**self.t)
        if self.knob.weight_decay:
            params -= lr * np.float32(self.knob.weight_decay) * params
        params -= lr * m_hat / (np.sqrt(v_hat) + np.float32(self.eps))

    def push_round(self, fetch: bool) -> None:
        """Push ``start - params`` (the outer gradient) and, with ``fetch``, wait for the new parameters."""
        assert self.start is not None and self.params is not None
        ex = self.exchange
        ex.accrue(self.start - self.params, self.round_examples)
        if ex.push(and_fetch=fetch):
            self.counters.fetches += 1
        ex.flush()
        self.start = self.params.copy() if fetch else None
        self.inner_done = self.round_examples = 0

    def flush(self) -> None:
        """Push the round so far (before a pause or the end); the next step starts a round afresh."""
        if self.inner_done and self.start is not None:
            self.push_round(fetch=False)
        self.exchange.flush()
