"""One Downpour SGD model replica (DistBelief Sec. 4.1, Algorithm "DownpourSGDClient").

Each step the replica fetches fresh parameters if ``n_fetch`` steps have
passed, computes a mini-batch gradient, adds it to its accumulated gradient,
takes a local SGD step, and every ``n_push`` steps pushes the accumulated
gradient to the parameter shards (each shard receives only its slice; they
apply SGD or Adagrad). Replicas never talk to each other.

This class is plain numpy: given in-process shards it runs in a test; on Dask,
``dbkit.cluster`` runs the same object inside a long-running task.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..data import MiniBatches
from ..nn import Network
from .schedule import Rates


class DownpourReplica(Rates):
    """A model replica training on its own data shard.

    Parameters
    ----------
    index : int
        Replica number (for reports).
    network : Network
    X, y : ndarray
        This replica's data shard.
    server : object
        Parameter server client with ``fetch()``, ``push(grad)``,
        ``push_fetch(grad)`` and ``versions`` (``dbkit.ps.ShardedParameters``).
    n_fetch, n_push : int
        Fetch every ``n_fetch`` steps; push every ``n_push`` steps.
    lr : float
        Learning rate of the replica's local SGD step between fetches.
    """

    def __init__(self, index: int, network: Network, X: np.ndarray, y: np.ndarray, server, batch_size: int,
                 n_fetch: int = 1, n_push: int = 1, lr: float = 0.05, seed: int = 0) -> None:
        self._init_rates(n_fetch, n_push, lr)
        self.index = index
        self.network, self.server = network, server
        self.batches = MiniBatches(X, y, batch_size, seed=seed)
        self.params: np.ndarray | None = None
        self.accrued = np.zeros(network.size, dtype=np.float32)
        self.steps = self.pushes = self.fetches = self.examples = 0
        self.rejected = self.nonfinite = 0
        self.losses: deque[float] = deque(maxlen=50)

    def step(self) -> float:
        """One Downpour step; returns the mini-batch loss."""
        plan = self.schedule.plan()
        if plan.fetch:
            self.params = self.server.fetch()
            self.fetches += 1
        X, y = next(self.batches)
        with np.errstate(all="ignore"):
            loss, grad = self.network.loss_and_grad(self.params, X, y)
            # one BLAS dot, no temporary: NaN and inf (and overflow) propagate into it
            finite = np.isfinite(loss) and np.isfinite(np.dot(grad, grad))
        if not finite:
            self.nonfinite += 1  # drop this gradient and start again from the server's parameters
            self.schedule.dropped()
            return float("nan")
        self.accrued += grad
        self.steps += 1
        self.examples += len(y)
        self.losses.append(loss)
        if plan.local:  # local step between fetches (pointless if we fetch next anyway)
            np.multiply(grad, np.float32(self.lr), out=grad)
            self.params -= grad
        if plan.push:
            self._push(and_fetch=plan.push_fetch)
        self.schedule.done(plan)
        return loss

    def _push(self, and_fetch: bool = False) -> None:
        if and_fetch:
            answers, self.params = self.server.push_fetch(self.accrued)
            self.fetches += 1
        else:
            answers = self.server.push(self.accrued)
        self.rejected += sum(1 for a in answers if not a["accepted"])
        self.pushes += 1
        self.accrued[:] = 0.0

    def flush(self) -> None:
        """Push any accumulated gradient now (before pausing or stopping)."""
        if self.schedule.since_push:
            self._push()
            self.schedule.flushed()

    def stats(self) -> dict:
        return {
            "replica": self.index, "steps": self.steps, "pushes": self.pushes, "fetches": self.fetches,
            "examples": self.examples, "rejected": self.rejected, "nonfinite": self.nonfinite,
            "n_fetch": self.n_fetch, "n_push": self.n_push, "lr": self.lr,
            "loss": float(np.mean(self.losses)) if self.losses else None,
            "bytes_fetched": self.server.bytes_fetched, "bytes_pushed": self.server.bytes_pushed,
        }
