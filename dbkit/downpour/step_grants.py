"""The step caps in force on a Downpour job's replicas, known exactly, so that a budget of steps over all
replicas is never overrun on real machines (issue #48: ``--steps 300`` ran 301 under load).

A share of the steps left is worked out from the replicas' figures as last polled, and a running replica
has stepped on since. So caps are changed in two rounds, each answered by the replicas' control actors
with the caps they set (``ReplicaControl.cap_each``: never below the steps a replica has begun):

1. **lower** every cap above its share (and freeze, at the steps it has begun, a replica whose cap is not
   known: one launched before the budget was set);
2. **raise** the others toward their shares, from what no replica holds: the total less the steps of the
   replicas that ended and the caps of those still running.

The caps in force therefore never add up to more than the total, and once every replica waits at its cap,
the rest is shared out whole: the replicas take the total exactly. In virtual time none of this is needed
(a share reaches its replicas at a known instant), and the simulator keeps its own shares (``step_budget``).
"""

from __future__ import annotations

import threading

from .controls import ControlActors
from .replica_book import ReplicaBook
from .shares import split


class StepGrants:
    """Each running replica's step cap as its control actor last answered (absolute steps; a replica that
    is not here has no cap known: it may be uncapped)."""

    def __init__(self, controls: ControlActors, book: ReplicaBook) -> None:
        self.controls, self.book = controls, book
        # lock order: leaf (the caps in force)
        self._lock = threading.Lock()
        self._caps: dict[int, int] = {}

    def launched(self, index: int, cap: int) -> None:
        """Replica ``index`` is launched with cap ``cap``."""
        with self._lock:
            self._caps[index] = cap

    def forget(self) -> None:
        """The caps were lifted."""
        with self._lock:
            self._caps.clear()

    def caps(self) -> dict[int, int]:
        with self._lock:
            return dict(self._caps)

    def share(self, total: int, weights: dict[int, float] | None = None) -> None:
        """Cap the live replicas so that all replicas together take at most ``total`` steps, each toward its
        share (by ``weights``, default equal) of what is left after their figures as last polled."""
        book = self.book
        figures, live, running = book.figures(), book.live(), book.running()
        left = max(0, total - book.total_steps())
        shares = split(left, [max(0.0, (weights or {}).get(i, 1.0)) for i in live])
        target = {i: figures[i].steps + s for i, s in zip(live, shares)}
        caps = self.caps()
        lower = {i: (t if i in caps else 0) for i, t in target.items() if t < caps.get(i, t + 1)}
        if lower:
            self._tell(lower)
            caps = self.caps()
        held = sum(caps[i] if i in caps else total + 1 for i in running)  # (a cap not known: nothing to give)
        ended = sum(f.steps for i, f in figures.items() if i not in running)
        pool = total - ended - held
        more: dict[int, int] = {}
        for i, t in target.items():
            if pool > 0 and i in caps and t > caps[i]:
                more[i] = caps[i] + min(t - caps[i], pool)
                pool -= more[i] - caps[i]
        if more:
            self._tell(more)

    def _tell(self, caps: dict[int, int]) -> None:
        """Set ``caps`` on the replicas' workers; keep the caps they answer (a replica whose worker did not
        answer keeps its old cap here: it may hold it still)."""
        _, answers = self.controls.ask(lambda ctl, epoch: ctl.cap_each(caps, epoch))
        running = set(self.book.running())
        with self._lock:
            for answer in answers:
                self._caps.update(answer)
            for i in [i for i in self._caps if i not in running]:  # ended: its steps count, not its cap
                del self._caps[i]
