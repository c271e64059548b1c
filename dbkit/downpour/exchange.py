"""When a Downpour replica (or one partition of one) fetches and pushes, and what it has under way with its
parameter shards (DistBelief Sec. 4.1).

The rule of "DownpourSGDClient" (``Schedule``): fetch every ``n_fetch`` steps,
push every ``n_push`` steps, and between fetches take local SGD steps with the
accumulated gradient. A push due right before a fetch goes with it as one
message per shard, and no local step is taken before a fetch (it would be
overwritten). One object holds this rule so that a whole replica and the K
partitions of a partitioned replica follow exactly the same schedule.

The client "starts asynchronously fetching parameters" and "pushing gradients"
and computes on meanwhile (Sec. 4.1 and its appendix). An ``Exchange`` holds
the accumulated gradient and what is under way: at most one fetch and one push
(a ``push_fetch`` is both). The gradient of a push stays untouched until its
answers are in (a shard on the same worker may read it in place), so two
buffers take turns. Arrived parameters go to ``on_params``, push answers to
``on_answers``. With ``overlap=False`` every call is waited for at once: the
blocking loop.

The same objects serve a whole replica and a partition; both wait on a thread
(a partition actor on its own, ``DownpourPartition._exchanging``), so each call
has one form.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ps import Pending, PushAnswer, check_lr
from ..settings import check

CHUNK = 65536  # float32 per chunk of the accrue-and-step pass: 256 KB, a few of which stay in a core's cache


class Exchange:
    """The accrued gradient and the calls under way between one replica (or partition) and its shards."""

    def __init__(self, server, size: int, overlap: bool, on_params: Callable[[np.ndarray], None],
                 on_answers: Callable[[list[PushAnswer]], None]) -> None:
        self.server, self.overlap = server, overlap
        # weakly: the owner holds its exchange, and a cycle would keep a dropped partition actor (and its
        # arithmetic thread) alive until the next garbage collection
        self._on_params, self._on_answers = _weak(on_params), _weak(on_answers)
        self.accrued = np.zeros(size, dtype=np.float32)
        self._sending = np.zeros(size, dtype=np.float32)  # the gradient of the push under way (or a spare)
        self.examples = 0
        self._fresh = True  # ``accrued`` holds nothing yet (its contents are stale, not zero)
        self.first_versions: list[int] | None = None  # versions its oldest accrued gradient was computed at
        self.fetching: Pending | None = None
        self.pushing: Pending | None = None

    @property
    def under_way(self) -> bool:
        return self.fetching is not None or self.pushing is not None

    def accrue(self, grad: np.ndarray, examples: int, local_step: tuple[np.ndarray, float] | None = None) -> None:
        """Add ``grad`` (of ``examples`` examples) to the accrued gradient; with ``local_step = (params, lr)``
        also take the replica's local step ``params -= lr * grad`` (``grad`` is scaled in place).

        Both read ``grad`` chunk by chunk, so the vector comes from memory once and not twice; every
        element's arithmetic is that of ``accrued += grad; grad *= lr; params -= grad``.
        """
        fresh, self._fresh = self._fresh, False  # nothing accrued since the last push: copy, where adding
        if fresh:  # to zeros would read a zeroed buffer for nothing (0 + g is g)
            self.first_versions = list(self.server.versions)
        self.examples += examples
        if local_step is None:
            if fresh:
                np.copyto(self.accrued, grad)
            else:
                self.accrued += grad
            return
        params, lr = local_step
        scale = np.float32(lr)
        for a in range(0, grad.size, CHUNK):
            g = grad[a : a + CHUNK]
            if fresh:
                np.copyto(self.accrued[a : a + CHUNK], g)
            else:
                self.accrued[a : a + CHUNK] += g
            g *= scale
            params[a : a + CHUNK] -= g

    # ---- starting (never waits) ------------------------------------------------------------------
    def start_fetch(self) -> bool:
        """Start a fetch unless one is under way; True if one was started."""
        if self.fetching is not None:
            return False
        self.fetching = self.server.start_fetch()
        return True

    def start_push(self, and_fetch: bool, versions: list[int]) -> bool:
        """Start pushing the accrued gradient, computed on parameters of ``versions`` (the push under way
        must be settled first); True if a fetch went with it."""
        assert self.pushing is None, "settle the push under way first"
        if self._fresh:  # a push with nothing accrued (rare) pushes zeros, not the buffer's stale contents
            self.accrued[:] = 0.0
        self.accrued, self._sending = self._sending, self.accrued  # the next accrue overwrites it: no zeroing
        self._fresh = True
        examples, firsts, self.examples = self.examples, self.first_versions, 0
        if and_fetch and self.fetching is None:
            self.pushing = self.fetching = self.server.start_push_fetch(self._sending, examples, firsts,
                                                                        versions=versions)
            return True
        self.pushing = self.server.start_push(self._sending, examples, firsts, versions=versions)
        return False

    def pending(self) -> list[Pending]:
        """What is under way, push first (one entry for a push_fetch)."""
        pushing, fetching = self.pushing, self.fetching
        if pushing is None:
            return [] if fetching is None else [fetching]
        return [pushing] if fetching is None or fetching is pushing else [pushing, fetching]

    def arrived(self) -> list[Pending]:
        """What is under way and has arrived."""
        return [p for p in self.pending() if p.ready()]

    def take(self, pending: Pending, result) -> None:
        """Hand on what ``pending`` brought: answers, parameters or both."""
        if pending is self.pushing:
            self.pushing = None
            _call(self._on_answers, result[0] if pending is self.fetching else result)
        if pending is self.fetching:
            self.fetching = None
            _call(self._on_params, result[1] if isinstance(result, tuple) else result)

    # ---- waiting (on a thread: a partition actor calls these on its own) ------------------------------
    def fetch_now(self) -> None:
        """Fetch and wait for it (a first fetch, a fresh start, or the blocking loop)."""
        if self.fetching is not None:  # the fetch under way first: it may be a push_fetch with answers
            self.take(self.fetching, self.fetching.result())
        self.start_fetch()
        assert self.fetching is not None
        self.take(self.fetching, self.fetching.result())

    def collect(self) -> None:
        if self.pushing is None and self.fetching is None:
            return
        for p in self.arrived():
            self.take(p, p.result())

    def push(self, and_fetch: bool) -> bool:
        """Push the accrued gradient (waiting only for the push before it, or for this one without overlap)."""
        versions = list(self.server.versions)  # before a push_fetch under way brings newer parameters
        if self.pushing is not None:
            self.take(self.pushing, self.pushing.result())
        fetched = self.start_push(and_fetch, versions)
        if not self.overlap:
            self.flush()
        else:
            self.collect()
        return fetched

    def flush(self) -> None:
        """Wait for everything under way."""
        for p in self.pending():
            self.take(p, p.result())


def _weak(fn: Callable) -> Callable[[], Callable | None]:
    """A reference to ``fn`` that does not keep a bound method's object alive."""
    return weakref.WeakMethod(fn) if hasattr(fn, "__self__") else (lambda: fn)


def _call(ref: Callable[[], Callable | None], value: Any) -> None:
    fn = ref()
    if fn is not None:
        fn(value)

def check_rates(n_fetch: int, n_push: int) -> tuple[int, int]:
    """Both rates as ints, or ``ValueError`` naming the one outside the settings table's range."""
    return check("n_fetch", n_fetch), check("n_push", n_push)


@dataclass(frozen=True)
class StepActions:
    """What one step does: ``fetch`` before computing; after it a ``local`` step, a ``push``,
    and ``push_fetch`` when the push also brings back fresh parameters."""

    fetch: bool
    local: bool
    push: bool
    push_fetch: bool


#: the sixteen possible steps, made once (a step asks for one; records are immutable)
_ACTIONS = {(f, lo, p, pf): StepActions(f, lo, p, pf) for f in (False, True) for lo in (False, True)
            for p in (False, True) for pf in (False, True)}


class Schedule:
    """Counters of one replica's steps since its last fetch and push, its rates, and ``lr``, the size of
    its local steps."""

    def __init__(self, n_fetch: int = 1, n_push: int = 1, lr: float = 0.05) -> None:
        self.n_fetch, self.n_push = check_rates(n_fetch, n_push)
        self.lr = check_lr(lr)
        self.since_fetch = self.since_push = 0
        self.have_params = False

    def configure(self, n_fetch: int, n_push: int, lr: float) -> None:
        """New rates and learning rate from the next step on (all checked before any changes)."""
        rates, lr = check_rates(n_fetch, n_push), check_lr(lr)
        (self.n_fetch, self.n_push), self.lr = rates, lr

    def next_step(self) -> StepActions:
        """What the next step does (nothing changes until ``done``)."""
        fetch = not self.have_params or self.since_fetch >= self.n_fetch
        since_fetch = (0 if fetch else self.since_fetch) + 1
        fetch_next = since_fetch >= self.n_fetch
        push = self.since_push + 1 >= self.n_push
        return _ACTIONS[fetch, not fetch_next, push, push and fetch_next]

    def done(self, actions: StepActions) -> None:
        """The step of ``actions`` was taken."""
        self.have_params = True
        since_fetch = (0 if actions.fetch else self.since_fetch) + 1
        self.since_fetch = 0 if actions.push_fetch else since_fetch
        self.since_push = 0 if actions.push else self.since_push + 1

    def dropped(self) -> None:
        """The step's gradient was not finite: it is dropped and the next step fetches afresh."""
        self.have_params = False

    def fetch_afresh(self) -> None:
        """The next step fetches first and waits for the parameters (a loop that needs fresher ones)."""
        self.have_params = False

    def flushed(self) -> None:
        self.since_push = 0
