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

from ..ps import check_lr
from ..settings import check


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
