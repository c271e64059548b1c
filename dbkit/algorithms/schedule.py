"""When a Downpour replica fetches, takes a local step and pushes (DistBelief Sec. 4.1).

The rule of "DownpourSGDClient": fetch every ``n_fetch`` steps, push every
``n_push`` steps, and between fetches take local SGD steps with the
accumulated gradient. A push due right before a fetch goes with it as one
message per shard, and no local step is taken before a fetch (it would be
overwritten). One object holds this rule so that a whole replica and the K
partitions of a partitioned replica follow exactly the same schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ps import check_lr


def check_rates(n_fetch: int, n_push: int) -> None:
    """Raise ``ValueError`` unless both rates are whole numbers in [1, 100000]."""
    for name, v in (("n_fetch", n_fetch), ("n_push", n_push)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= 100_000:
            raise ValueError(f"{name} must be a whole number in [1, 100000], got {v!r}")


@dataclass(frozen=True)
class StepPlan:
    """What one step does: ``fetch`` before computing; after it a ``local`` step, a ``push``,
    and ``push_fetch`` when the push also brings back fresh parameters."""

    fetch: bool
    local: bool
    push: bool
    push_fetch: bool


class Schedule:
    """Counters of one replica's steps since its last fetch and push."""

    def __init__(self, n_fetch: int = 1, n_push: int = 1) -> None:
        check_rates(n_fetch, n_push)
        self.n_fetch, self.n_push = int(n_fetch), int(n_push)
        self.since_fetch = self.since_push = 0
        self.have_params = False

    def plan(self) -> StepPlan:
        """The plan of the next step (nothing changes until ``done``)."""
        fetch = not self.have_params or self.since_fetch >= self.n_fetch
        since_fetch = (0 if fetch else self.since_fetch) + 1
        fetch_next = since_fetch >= self.n_fetch
        push = self.since_push + 1 >= self.n_push
        return StepPlan(fetch, local=not fetch_next, push=push, push_fetch=push and fetch_next)

    def done(self, plan: StepPlan) -> None:
        """The step of ``plan`` was taken."""
        self.have_params = True
        since_fetch = (0 if plan.fetch else self.since_fetch) + 1
        self.since_fetch = 0 if plan.push_fetch else since_fetch
        self.since_push = 0 if plan.push else self.since_push + 1

    def dropped(self) -> None:
        """The step's gradient was not finite: it is dropped and the next step fetches afresh."""
        self.have_params = False

    def flushed(self) -> None:
        self.since_push = 0


class Rates:
    """Mixin for replicas: ``n_fetch`` and ``n_push`` (held by ``self.schedule``) and ``lr``."""

    schedule: Schedule
    lr: float

    def _init_rates(self, n_fetch: int, n_push: int, lr: float) -> None:
        self.schedule = Schedule(n_fetch, n_push)
        self.lr = check_lr(lr)

    @property
    def n_fetch(self) -> int:
        return self.schedule.n_fetch

    @property
    def n_push(self) -> int:
        return self.schedule.n_push

    def configure(self, n_fetch: int | None = None, n_push: int | None = None, lr: float | None = None) -> None:
        """Change rates or learning rate; takes effect from the next step. Validates all first."""
        nf = self.n_fetch if n_fetch is None else n_fetch
        npush = self.n_push if n_push is None else n_push
        check_rates(nf, npush)
        self.lr = self.lr if lr is None else check_lr(lr)
        self.schedule.n_fetch, self.schedule.n_push = int(nf), int(npush)
