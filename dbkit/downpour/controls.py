"""Each worker's control actor: where the Downpour replicas on that worker read their settings and leave
their figures (``ReplicaControl``), and the numbered changes (*epochs*) sent through them.

A change to the replicas' settings is told to every worker's control actor at a new epoch; a replica
echoes the epoch it acted on in its figures, so the fleet can wait until the running replicas, not just
their control actors, have taken it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..runtime.protocol import Runtime
from .replica_task import ReplicaControl


class ControlActors:
    """The control actors of one job's workers, created when a worker gets its first replica."""

    def __init__(self, cluster: Runtime, tag: str) -> None:
        self.cluster, self.tag = cluster, tag
        # lock order: leaf (the actors by worker, their names, and the epoch)
        self._lock = threading.Lock()
        self._actors: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # worker -> its control actor's name in the registry
        self._made = 0  # names are never reused: a lost worker's control may still be registered
        self.epoch = 0

    def on(self, worker: str) -> Any:
        """The control actor on ``worker`` (placed now if it has none)."""
        with self._lock:
            if worker in self._actors:
                return self._actors[worker]
            name = f"control-{self._made}-{self.tag}"
            self._made += 1
        actor = self.cluster.place_actor(name, ReplicaControl, worker=worker)
        with self._lock:
            self._actors[worker], self._names[worker] = actor, name
        return actor

    def items(self) -> list[tuple[str, Any]]:
        """``(worker, control actor)`` of every worker that has one."""
        with self._lock:
            return list(self._actors.items())

    def tell(self, call: Callable[[Any, int], Any]) -> int:
        """``call(control, epoch)`` on every worker's control actor, at a new epoch; returns the epoch."""
        return self.ask(call)[0]

    def ask(self, call: Callable[[Any, int], Any]) -> tuple[int, list[Any]]:
        """``call(control, epoch)`` on every worker's control actor, at a new epoch; returns the epoch and
        the answers (a lost worker's, or one that did not come within 10 s, left out)."""
        with self._lock:
            self.epoch += 1
            epoch = self.epoch
        pending = []
        for _, ctl in self.items():
            try:
                pending.append(call(ctl, epoch))
            except RuntimeError:  # "Worker holding Actor was lost": its replicas are gone already
                pass
        answers = []
        for p in pending:
            try:
                answers.append(p.result(timeout=10))
            except Exception:  # noqa: BLE001 - the same, noticed while waiting
                pass
        return epoch, answers

    def forget(self, worker: str) -> None:
        """``worker`` is lost: drop its control actor."""
        with self._lock:
            self._actors.pop(worker, None)
            name = self._names.pop(worker, None)
        if name is not None:
            self.cluster.registry.release(name)

    def release(self) -> None:
        """Forget every control actor (their Futures keep them alive)."""
        with self._lock:
            self._actors, self._names = {}, {}
