"""One Downpour SGD model replica (DistBelief Sec. 4.1, Algorithm "DownpourSGDClient").

Each step the replica fetches fresh parameters if ``n_fetch`` steps have
passed, computes a mini-batch gradient, adds it to its accumulated gradient,
takes a local SGD step, and every ``n_push`` steps pushes the accumulated
gradient to the parameter shards (each shard receives only its slice; they
apply SGD or Adagrad). Replicas never talk to each other.

As the paper's client does, a replica with ``overlap`` (the default) only
*starts* a fetch or a push and computes on meanwhile: a fetch's parameters
replace its own when they arrive, a push's answers are counted when they come.
At most one fetch and one push are under way; the gradient being pushed stays
untouched until its answers are in (a shard on the same worker may read it
in place). When communication is instant (in-process shards) the result is
bit for bit that of the blocking replica (``overlap=False``).

This class is plain numpy: given in-process shards it runs in a test; on Dask,
``dbkit.cluster`` runs the same object inside a long-running task.
"""

from __future__ import annotations

import numpy as np

from ..data import MiniBatches
from ..nn import Network
from ..ps import Pending, PushAnswer
from .figures import ReplicaCounters, ReplicaFigures
from .schedule import Schedule


class DownpourReplica:
    """A model replica training on its own data shard.

    Parameters
    ----------
    index : int
        Replica number (for reports).
    network : Network
    X, y : ndarray
        This replica's data shard.
    server : object
        Parameter server client with ``fetch()``, ``push(grad, ...)``,
        ``push_fetch(grad, ...)``, their ``start_*`` forms and ``versions`` (``dbkit.ps.ShardedParameters``).
    n_fetch, n_push : int
        Fetch every ``n_fetch`` steps; push every ``n_push`` steps.
    lr : float
        Learning rate of the replica's local SGD step between fetches.
    max_nonfinite : int
        Non-finite gradients in a row after which the replica has ``diverged``.
    overlap : bool
        Fetch and push in the background (the paper's client); ``False`` waits for each.
    """

    def __init__(self, index: int, network: Network, X: np.ndarray, y: np.ndarray, server, batch_size: int,
                 n_fetch: int = 1, n_push: int = 1, lr: float = 0.05, seed: int = 0, max_nonfinite: int = 20,
                 overlap: bool = True) -> None:
        self.index = index
        self.network, self.server = network, server
        self.schedule = Schedule(n_fetch, n_push, lr)
        self.batches = MiniBatches(X, y, batch_size, seed=seed)
        self.params: np.ndarray | None = None
        self.accrued = np.zeros(network.size, dtype=np.float32)
        self.counters = ReplicaCounters(max_nonfinite)
        self._accrued_examples = 0
        self._first_versions: list[int] | None = None  # versions its oldest accrued gradient was computed at
        self.overlap = overlap
        self._sending = np.zeros_like(self.accrued)  # the gradient of the push under way (or a spare)
        self._fetching: Pending | None = None  # a fetch (or push_fetch) under way
        self._pushing: Pending | None = None  # a push (or push_fetch) under way

    @property
    def under_way(self) -> bool:
        """A fetch or a push has been started and its answers are not yet taken."""
        return self._fetching is not None or self._pushing is not None

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
        """One Downpour step; returns the mini-batch loss (NaN if its gradient was dropped)."""
        actions = self.schedule.next_step()
        self._collect()
        if actions.fetch:
            if self.params is None or not self.overlap or not self.schedule.have_params:
                self._settle_fetch()  # a first or fresh start waits: there is nothing to compute on
                self.params = self.server.fetch()
            elif self._fetching is None:
                self._fetching = self.server.start_fetch()
                self._collect()
            self.counters.fetches += 1
        assert self.params is not None
        X, y = next(self.batches)
        with np.errstate(all="ignore"):
            loss, grad = self.network.loss_and_grad(self.params, X, y)
            # one BLAS dot, no temporary: NaN and inf (and overflow) propagate into it
            finite = np.isfinite(loss) and np.isfinite(np.dot(grad, grad))
        if not finite:
            self.counters.dropped()  # drop this gradient and start again from the server's parameters
            self.schedule.dropped()
            return float("nan")
        if self._accrued_examples == 0:
            self._first_versions = list(self.server.versions)
        self.accrued += grad
        self._accrued_examples += len(y)
        self.counters.stepped(float(loss), len(y))
        if actions.local:  # local step between fetches (pointless if we fetch next anyway)
            np.multiply(grad, np.float32(self.lr), out=grad)
            self.params -= grad
        if actions.push:
            self._push(and_fetch=actions.push_fetch)
        self.schedule.done(actions)
        return float(loss)

    def _push(self, and_fetch: bool = False) -> None:
        examples, firsts = self._accrued_examples, self._first_versions
        if not self.overlap:
            if and_fetch:
                answers, self.params = self.server.push_fetch(self.accrued, examples=examples, first_versions=firsts)
                self.counters.fetches += 1
            else:
                answers = self.server.push(self.accrued, examples=examples, first_versions=firsts)
            self._answered(answers)
            self.accrued[:] = 0.0
        else:
            versions = list(self.server.versions)  # of the parameters this gradient was computed on
            self._settle_push()  # one push under way at most: its buffer becomes the spare
            self.accrued, self._sending = self._sending, self.accrued
            self.accrued[:] = 0.0
            if and_fetch and self._fetching is None:
                self._pushing = self._fetching = self.server.start_push_fetch(self._sending, examples, firsts,
                                                                              versions=versions)
                self.counters.fetches += 1
            else:
                self._pushing = self.server.start_push(self._sending, examples, firsts, versions=versions)
            self._collect()
        self._accrued_examples = 0

    def _answered(self, answers: list[PushAnswer]) -> None:
        self.counters.answered(answers)
        if any(not a.accepted and (a.reason or "").startswith("non-finite") for a in answers):
            self.counters.dropped()  # the sum overflowed: as good as a non-finite gradient

    def _collect(self) -> None:
        """Take what has arrived, without waiting: a push's answers, a fetch's parameters."""
        if self._pushing is not None and self._pushing.ready():
            self._settle_push()
        if self._fetching is not None and self._fetching.ready():
            self._settle_fetch()

    def _settle_push(self) -> None:
        """Wait for the push under way (if any) and count its answers."""
        pending, self._pushing = self._pushing, None
        if pending is not None:
            result = pending.result()
            self._answered(result[0] if pending is self._fetching else result)
            if pending is self._fetching:
                self._settle_fetch()

    def _settle_fetch(self) -> None:
        """Wait for the fetch under way (if any) and take its parameters."""
        pending, self._fetching = self._fetching, None
        if pending is not None:
            result = pending.result()
            if pending is self._pushing:  # a push_fetch: its answers count too
                self._pushing = None
                self._answered(result[0])
            self.params = result[1] if isinstance(result, tuple) else result

    def flush(self) -> None:
        """Push any accumulated gradient now and wait for everything under way (before pausing or stopping)."""
        if self._accrued_examples:
            self._push()
            self.schedule.flushed()
        self._settle_push()
        self._settle_fetch()

    def figures(self) -> ReplicaFigures:
        return self.counters.figures(
            self.index, n_fetch=self.schedule.n_fetch, n_push=self.schedule.n_push, lr=self.lr,
            bytes_fetched=self.server.bytes_fetched, bytes_pushed=self.server.bytes_pushed)
