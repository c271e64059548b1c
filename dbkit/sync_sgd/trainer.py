"""Synchronous mini-batch SGD: the single-process baseline everything is compared to.

By default the parameters are a plain in-memory vector updated with the same
rule a shard uses (``dbkit.ps.UpdateRule``). Given a ``server`` (anything with
``fetch()`` and ``push(grad)``, such as ``dbkit.ps.ShardedParameters`` over
Dask actors), every step fetches the parameters and pushes the gradient
instead: one replica, synchronous, through the parameter server. The job that
runs it (start, fit, pause, events) is ``dbkit.SyncSGD``.
"""

from __future__ import annotations

import numpy as np

from ..data import Dataset, MiniBatches
from ..nn import Network
from ..ps import UpdateRule, make_rule
from ..training.figures import ReplicaCounters, ReplicaFigures


class TrainingDiverged(FloatingPointError):
    """A gradient had NaN or inf; the parameters were left as they were before it."""


class SGDTrainer:
    """Plain mini-batch SGD (or Adagrad) in one process.

    Parameters
    ----------
    network : Network
    data : Dataset
    batch_size, lr, optimizer, seed
        As in ``RunConfig``.
    server : object, optional
        A parameter server client with ``fetch()``, ``push(grad)`` and ``set_lr(lr)``.
    """

    def __init__(self, network: Network, data: Dataset, batch_size: int = 32, lr: float = 0.05,
                 optimizer: str | UpdateRule = "sgd", seed: int = 0, server=None) -> None:
        self.network, self.server = network, server
        self.rule = make_rule(optimizer, lr)
        self.params = network.init_params(seed)
        self.opt_state = self.rule.new_state(network.size)
        self._scratch = (np.empty(network.size, np.float32), np.empty(network.size, np.float32))
        self.batches = MiniBatches(data.X_train, data.y_train, batch_size, seed=seed)
        self.counters = ReplicaCounters()

    @property
    def steps(self) -> int:
        return self.counters.steps

    def release(self) -> None:
        """Forget the parameter server (its actor proxies would keep the shards alive)."""
        self.server = None

    def set_lr(self, lr: float) -> None:
        """A new learning rate from the next step on (and on the shards, if any)."""
        rule = self.rule.but(lr=lr)
        if self.server is not None:
            self.server.set_lr(rule.lr)
        self.rule = rule

    def set_optimizer(self, optimizer: str | UpdateRule) -> None:
        """A new update rule (a name, or a rule with its knobs) from the next step on (and on the shards, if
        any); a rule of another name starts from fresh state (Adagrad's accumulators)."""
        rule = make_rule(optimizer, self.rule.lr)
        if self.server is not None:
            self.server.set_optimizer(rule)
        elif rule.name != self.rule.name:
            self.opt_state = rule.new_state(self.network.size)
        self.rule = rule

    def step(self) -> float:
        """One mini-batch step; returns the mini-batch loss.

        Raises ``TrainingDiverged`` (parameters untouched) on a non-finite loss or gradient.
        """
        X, y = next(self.batches)
        if self.server is not None:
            self.params = self.server.fetch()
            self.counters.fetches += 1
        with np.errstate(all="ignore"):  # overflow is caught just below, with a clearer message
            loss, grad = self.network.loss_and_grad(self.params, X, y)
            finite = np.isfinite(loss) and np.isfinite(np.dot(grad, grad))
        if not finite:
            self.counters.dropped()
            raise TrainingDiverged(
                f"non-finite loss or gradient at step {self.steps + 1}; parameters kept as they were. "
                f"Lower the learning rate (lr={self.rule.lr}) or use Adagrad.")
        if self.server is None:
            a, b = self._scratch  # fresh parameters each step: the rule's staleness is 0
            self.rule.apply_scaled(self.params, grad, self.rule.scale(grad, a), self.opt_state, b, 0)
        else:
            answers = self.server.push(grad, examples=len(y))
            self.counters.answered(answers)
            refused = [a.reason for a in answers if not a.accepted]
            if refused:
                raise TrainingDiverged(f"the parameter server refused the push at step {self.steps + 1}: {refused}")
        self.counters.stepped(float(loss), len(y))
        return float(loss)

    def current_params(self) -> np.ndarray:
        return self.server.fetch() if self.server is not None else self.params.copy()

    def figures(self) -> ReplicaFigures:
        return self.counters.figures(
            0, lr=self.rule.lr, bytes_fetched=getattr(self.server, "bytes_fetched", 0),
            bytes_pushed=getattr(self.server, "bytes_pushed", 0))
