"""Steering a running Downpour job: rates, learning rate, pause, replicas in and out.

Every change is validated before anything is touched, and only one change runs
at a time: a second one made meanwhile (a widget moved twice quickly, say) is
refused with ``ChangeInProgress`` instead of interleaving with the first.
"""

from __future__ import annotations

import contextlib

from ..config import RunConfig

STEERABLE = ("n_fetch", "n_push", "lr", "partitions", "shards")
LAYOUT = ("partitions", "shards")


class ChangeInProgress(RuntimeError):
    """Another change (set, add, remove, pause) is still being applied; nothing was changed."""


class Steering:
    """Mixin for ``DownpourSGD``: the methods that change a running job."""

    def _broadcast(self, indices: list[int] | None = None, **changes) -> None:
        if indices is None and "paused" in changes:
            self._paused = bool(changes["paused"])  # replicas launched from now on start so too
        pending = []
        for ctl in list(self._controls.values()):
            try:
                pending.append(ctl.set(indices, **changes))
            except RuntimeError:  # "Worker holding Actor was lost": its replicas are gone already
                pass
        for p in pending:
            try:
                p.result(timeout=10)
            except Exception:  # noqa: BLE001 - the same, noticed while waiting
                pass

    @contextlib.contextmanager
    def _steer(self):
        """Hold the change lock, or refuse at once if another change holds it."""
        if not self._change.acquire(blocking=False):
            raise ChangeInProgress("another change is still being applied; try again when it is done")
        try:
            yield
        finally:
            self._change.release()

    def set(self, **changes) -> RunConfig:
        """Change ``n_fetch``, ``n_push``, ``lr``, ``partitions`` or ``shards`` while training runs.

        Rates and ``lr`` take effect from each replica's next step. A new
        ``partitions`` or ``shards`` re-lays the job out (DistBelief Sec. 3):
        the replicas push what they accumulated and stop, the parameters and
        Adagrad accumulators move to shards aligned to the new partitions, and
        as many replicas start again, each split into ``partitions`` parts.

        Values are validated first; a bad value raises ``ValueError`` and changes nothing.
        """
        unknown = set(changes) - set(STEERABLE)
        if unknown:
            raise ValueError(f"set() takes {STEERABLE}; {sorted(unknown)} cannot change while training")
        if self.stopped:
            raise RuntimeError("this DownpourSGD was stopped; its settings are final (make a new one)")
        new = self.config.replace(**changes)
        relayout = any(getattr(new, k) != getattr(self.config, k) for k in LAYOUT)
        alignment = self._check_layout(new) if relayout else None
        with self._steer():
            running = self.started and not self.stopped
            if running and "lr" in changes:
                self.server.set_lr(new.lr)
            if running and relayout:
                self._relayout(new)
            elif running:
                self._broadcast(**{k: v for k, v in changes.items() if k not in LAYOUT})
            if alignment is not None and not self.started:  # placed as asked when it starts
                self.alignment = alignment
            self.config = new
        return new

    def pause(self) -> None:
        """Replicas push what they accumulated and wait."""
        with self._steer():
            self._broadcast(paused=True)
            self.book.clock_stop()

    def resume(self) -> None:
        with self._steer():
            self._broadcast(paused=False)
            self.book.clock_start()

    def add_replicas(self, k: int = 1) -> list[int]:
        """Start ``k`` more replicas while training runs; returns their indices."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1 or self.book.live_count() + k > 256:
            raise ValueError(f"k must be a whole number >= 1 with at most 256 replicas in all, got {k!r}")
        if not self.started or self.stopped:
            raise RuntimeError("add_replicas needs a running job: call start() or fit() first")
        with self._steer():
            with self._launching:
                new = [self.book.next_index() + j for j in range(k)]
                for i in new:
                    self._launch(i)
            self.config = self.config.replace(replicas=self.book.live_count())
        return new

    def remove_replicas(self, k: int = 1) -> list[int]:
        """Stop the ``k`` most recently added replicas (at least one keeps training)."""
        live = self.book.live()
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(live) - 1:
            raise ValueError(f"k must be a whole number in [1, {len(live) - 1}] (one replica must remain), got {k!r}")
        with self._steer():
            gone = sorted(live)[-k:]
            self._broadcast(gone, stop=True)
            self.book.wait(gone, timeout=60, state="removed")
            self._release_partitions(gone)
            self.config = self.config.replace(replicas=max(1, self.book.live_count()))
        return gone
