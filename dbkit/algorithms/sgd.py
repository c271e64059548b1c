"""Synchronous mini-batch SGD: the single-process baseline everything is compared to.

By default the parameters are a plain in-memory vector updated with the same
rule a shard uses (``dbkit.ps.UpdateRule``). Given a ``server`` (anything with
``fetch()`` and ``push(grad)``, such as ``dbkit.ps.ShardedParameters`` over
Dask actors), every step fetches the parameters and pushes the gradient
instead: one replica, synchronous, through the parameter server.
"""

from __future__ import annotations

import time

import numpy as np

from ..config import RunConfig
from ..data import Dataset, MiniBatches
from ..nn import Network
from ..ps import UpdateRule
from .evaluate import Evaluator


class TrainingDiverged(RuntimeError):
    """A gradient had NaN or inf; the parameters were left as they were before it."""


class SyncSGD:
    """Plain mini-batch SGD (or Adagrad) on one process.

    Parameters
    ----------
    network : Network
    data : Dataset
    config : RunConfig
        Uses ``lr``, ``optimizer``, ``batch_size``, ``seed``, ``eval_every``.
    server : object, optional
        A parameter server client with ``fetch()`` and ``push(grad)``.
    record : callable, optional
        ``record(kind, **fields)`` is called for every fetch, push and eval
        (``dbkit.telemetry.EventLog.record`` fits).
    """

    name = "sgd"

    def __init__(self, network: Network, data: Dataset, config: RunConfig, server=None, record=None) -> None:
        self.network, self.data, self.config, self.server = network, data, config, server
        self.record = record or (lambda kind, **fields: None)
        self.rule = UpdateRule(config.optimizer, config.lr)
        self.params = network.init_params(config.seed)
        self.opt_state = self.rule.new_state(network.size)
        self.batches = MiniBatches(data.X_train, data.y_train, config.batch_size, seed=config.seed)
        self.evaluator = Evaluator(network, data, seed=config.seed)
        self.step_count = 0
        self.examples = 0
        self.fetches = self.pushes = 0
        self.history: list[dict] = []
        self.recent_losses: list[float] = []
        self.train_seconds = 0.0

    def step(self) -> float:
        """One mini-batch step; returns the mini-batch loss."""
        X, y = next(self.batches)
        if self.server is not None:
            self.params = self.server.fetch()
            self.fetches += 1
            self.record("fetch", replica=0, step=self.step_count, bytes=self.params.nbytes)
        with np.errstate(all="ignore"):  # overflow is caught just below, with a clearer message
            loss, grad = self.network.loss_and_grad(self.params, X, y)
        if not np.isfinite(grad).all() or not np.isfinite(loss):
            raise TrainingDiverged(
                f"non-finite loss or gradient at step {self.step_count + 1}; parameters kept as they were. "
                f"Lower the learning rate (lr={self.config.lr})."
            )
        if self.server is None:
            self.rule.apply(self.params, grad, self.opt_state)
        else:
            answers = self.server.push(grad)
            refused = [a["reason"] for a in answers if not a["accepted"]]
            if refused:
                raise TrainingDiverged(f"parameter server refused the push at step {self.step_count + 1}: {refused}")
            self.pushes += 1
            self.record("push", replica=0, step=self.step_count, bytes=grad.nbytes,
                        staleness=[a["staleness"] for a in answers])
        self.step_count += 1
        self.examples += len(y)
        self.recent_losses.append(loss)
        return loss

    def current_params(self) -> np.ndarray:
        return self.server.fetch() if self.server is not None else self.params.copy()

    def evaluate(self, t: float) -> dict:
        row = {"t": round(t, 4), "step": self.step_count, "examples": self.examples}
        row.update(self.evaluator(self.current_params()))
        if self.recent_losses:
            row["batch_loss"] = float(np.mean(self.recent_losses))
        self.history.append(row)
        self.record("eval", **row)
        return row

    def fit(self, steps: int | None = None, seconds: float | None = None, progress: bool = False) -> list[dict]:
        """Train for ``steps`` steps or ``seconds`` seconds (defaults from the config).

        Evaluates every ``eval_every`` steps and at the end; returns the history.
        """
        if steps is None and seconds is None:
            steps, seconds = self.config.steps, self.config.seconds
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=steps if steps else seconds, unit="step" if steps else "s", desc=self.name, leave=False)
        start = time.perf_counter()
        if not self.history:
            self.evaluate(0.0)
        target = self.step_count + steps if steps else None
        try:
            while True:
                elapsed = time.perf_counter() - start
                if (target is not None and self.step_count >= target) or (seconds is not None and elapsed >= seconds):
                    break
                t0 = time.perf_counter()
                self.step()
                self.train_seconds += time.perf_counter() - t0
                if self.step_count % self.config.eval_every == 0:
                    row = self.evaluate(time.perf_counter() - start)
                    self.recent_losses.clear()
                    if bar is not None:
                        bar.set_postfix(loss=f"{row['train_loss']:.3f}", acc=f"{row['test_accuracy']:.3f}")
                if bar is not None:  # tqdm throttles its own redraws
                    bar.update(1 if steps else round(min(time.perf_counter() - start, seconds) - bar.n, 2))
        finally:
            if bar is not None:
                bar.close()
        if self.history[-1]["step"] != self.step_count:
            self.evaluate(time.perf_counter() - start)
        return self.history

    def summary(self) -> dict:
        """Raw figures for ``dbkit.telemetry.build_report``."""
        stats = self.server.stats() if self.server is not None else []
        return {
            "algorithm": self.name,
            "params": self.current_params(),
            "steps": self.step_count,
            "examples": self.examples,
            "train_seconds": self.train_seconds,
            "history": list(self.history),
            "replicas": [{"replica": 0, "steps": self.step_count, "pushes": self.pushes, "fetches": self.fetches,
                          "examples": self.examples, "failures": 0, "worker": "local"}],
            "shards": stats,
            "bytes": {
                "fetched": getattr(self.server, "bytes_fetched", 0),
                "pushed": getattr(self.server, "bytes_pushed", 0),
                "between_partitions": 0, "between_partitions_min": 0,
            },
        }
