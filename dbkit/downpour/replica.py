"""One Downpour SGD model replica (DistBelief Sec. 4.1, Algorithm "DownpourSGDClient").

Each step the replica fetches fresh parameters if ``n_fetch`` steps have
passed, computes a mini-batch gradient, adds it to its accumulated gradient,
takes a local SGD step, and every ``n_push`` steps pushes the accumulated
gradient to the parameter shards (each shard receives only its slice; they
apply SGD or Adagrad). Replicas never talk to each other.

As the paper's client does, a replica with ``overlap`` (the default) only
*starts* a fetch or a push and computes on meanwhile (its ``Exchange``): a
fetch's parameters replace its own when they arrive, a push's answers are
counted when they come. When communication is instant (in-process shards)
the result is bit for bit that of the blocking replica (``overlap=False``).

This class is plain numpy: given in-process shards it runs in a test; on Dask,
the job (``dbkit.downpour.job``) runs the same object inside a long-running task.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..data import MiniBatches
from ..nn import Network
from ..ps import PushAnswer
from ..runtime.clock import REAL_TIME, Clock
from ..settings import Knobs as NoKnobs
from ..settings import Setting
from ..training.figures import ReplicaCounters, ReplicaFigures
from .exchange import Exchange, Schedule
from .replica_kinds import register_replica

FIRST_WAIT, LONGEST_WAIT = 0.0005, 0.02  # seconds between a waiting loop's looks (``wait_until``: doubling)


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
    coordinator : optional
        Its end of the coordinator its loop names (``coordinator_name``): what replicas share besides
        parameters (``dbkit.downpour.coordinators``).

    A subclass registered with ``register_replica`` (``dbkit.downpour.replica_kinds``)
    is another replica loop over the same parts. Its own settings are declared once, as the fields of its
    ``Knobs`` (a frozen dataclass of ``dbkit.settings.knob(...)`` fields): they arrive as keyword arguments,
    checked, in ``self.knob``; ``knobs`` (their ``Setting``s) follow from them when it is registered.
    """

    name: ClassVar[str] = "downpour"
    Knobs: ClassVar[type[NoKnobs]] = NoKnobs  # its own settings, declared once (none for Downpour's own loop)
    knobs: ClassVar[tuple[Setting, ...]] = ()  # their Settings (``register_replica`` derives them)
    knob: NoKnobs  # their values
    shard_rate: ClassVar[str | None] = None  # the knob that sets the shards' rate (None: the run's lr)
    optimizers: ClassVar[tuple[str, ...] | None] = None  # the shard rules it is meant for (None: any)
    #: the coordinator its replicas share (``dbkit.downpour.coordinators``; None: they share only parameters)
    coordinator_name: ClassVar[str | None] = None

    @classmethod
    def check_settings(cls, replicas: int, settings: dict) -> None:
        """Refuse (``ValueError``) its knobs' ``settings`` for a job of ``replicas`` replicas, where they cannot go
        together (beyond each knob's own range); checked as a job is made and at every ``set()``."""

    def __init__(self, index: int, network: Network, X: np.ndarray, y: np.ndarray, server, batch_size: int,
                 n_fetch: int = 1, n_push: int = 1, lr: float = 0.05, seed: int = 0, max_nonfinite: int = 20,
                 overlap: bool = True, coordinator: Any = None, **knobs: Any) -> None:
        unknown = sorted(set(knobs) - set(self.Knobs.__dataclass_fields__))
        if unknown:
            raise ValueError(f"replica {self.name!r} has no setting {', '.join(unknown)}")
        self.knob = self.Knobs(**knobs)  # each checked (out of range: a ValueError naming it)
        overlap = overlap and self.may_overlap()
        self.index = index
        self.label = f"replica{index}"  # what its coordinator knows it by
        #: its end of the coordinator its loop names (each call returns the answer), or None
        self.coordinator = coordinator
        self.network, self.server = network, server
        self.schedule = Schedule(n_fetch, n_push, lr)
        self.batches = MiniBatches(X, y, batch_size, seed=seed)
        self.params: np.ndarray | None = None
        self.counters = ReplicaCounters(max_nonfinite)
        self.exchange = Exchange(server, network.size, overlap, self.took_params, self._answered)
        self.clock: Clock = REAL_TIME  # its runtime's (virtual on a simulated cluster): ``run_replica`` sets it

    def may_overlap(self) -> bool:
        """Whether this loop's fetches and pushes may run in the background (``overlap``); a loop whose steps
        must wait for them (SSP's bounds) says no."""
        return True

    @property
    def under_way(self) -> bool:
        """A fetch or a push has been started and its answers are not yet taken."""
        return self.exchange.under_way

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
        ex = self.exchange
        ex.collect()
        if actions.fetch:
            if not ex.overlap or not self.schedule.have_params:
                ex.fetch_now()  # a first or fresh start waits: there is nothing to compute on
            else:
                ex.start_fetch()
                ex.collect()
            self.counters.fetches += 1
        assert self.params is not None
        self.about_to_compute()
        X, y = next(self.batches)
        loss, grad, finite = self.gradient(self.params, X, y)
        if not finite:
            self.counters.dropped()  # drop this gradient and start again from the server's parameters
            self.schedule.dropped()
            return float("nan")
        # the local step between fetches is pointless if we fetch next anyway
        ex.accrue(grad, len(y), (self.params, self.lr) if actions.local else None)
        self.counters.stepped(float(loss), len(y))
        if actions.push:
            self.about_to_push()
            if ex.push(and_fetch=actions.push_fetch):
                self.counters.fetches += 1
        self.schedule.done(actions)
        return float(loss)

    def about_to_compute(self) -> None:
        """Called once the step's parameters are in place, before its gradient: nothing in Downpour; a loop that
        tells the others what it has read (SSP) does it here."""

    def about_to_push(self) -> None:
        """Called before the step's push: nothing in Downpour; a loop whose pushes wait for the others (SSP)
        waits here."""

    def gradient(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray, bool]:
        """The mini-batch loss and gradient at ``params``, and whether both are finite (a loop drops the
        gradient if not)."""
        with np.errstate(all="ignore"):
            loss, grad = self.network.loss_and_grad(params, X, y)
            # one BLAS dot, no temporary: NaN and inf (and overflow) propagate into it
            finite = bool(np.isfinite(loss) and np.isfinite(np.dot(grad, grad)))
        return float(loss), grad, finite

    def wait_until(self, condition: Callable[[], bool], look_first: bool = True) -> None:
        """Wait, in the runtime's time (``clock``), until ``condition()`` holds (for a loop that waits for the
        others: a call to shard 0), looking ever less often; ``look_first=False`` waits once before the first
        look (the caller has just looked)."""
        wait = FIRST_WAIT
        if not look_first:
            self.clock.sleep(wait)
            wait *= 2
        while not condition():
            self.clock.sleep(wait)
            wait = min(2 * wait, LONGEST_WAIT)

    def took_params(self, params: np.ndarray) -> None:
        """What a fetch brought (the exchange calls it): Downpour's replica computes on it from now on; a loop
        that keeps its own parameters (EASGD's) keeps it elsewhere."""
        self.params = params

    def _answered(self, answers: list[PushAnswer]) -> None:
        self.counters.answered(answers)
        if any(not a.accepted and (a.reason or "").startswith("non-finite") for a in answers):
            self.counters.dropped()  # the sum overflowed: as good as a non-finite gradient

    def flush(self) -> None:
        """Push any accumulated gradient now and wait for everything under way (before pausing or stopping)."""
        if self.exchange.examples:
            self.exchange.push(and_fetch=False)
            self.schedule.flushed()
        self.exchange.flush()

    def figures(self) -> ReplicaFigures:
        return self.counters.figures(
            self.index, n_fetch=self.schedule.n_fetch, n_push=self.schedule.n_push, lr=self.lr,
            bytes_fetched=self.server.bytes_fetched, bytes_pushed=self.server.bytes_pushed)


register_replica(DownpourReplica)
