"""A heartbeat to every parameter shard, so that a machine that stops answering is noticed.

A stopped or wedged machine (SIGSTOP, a kernel stall, swapping to death) keeps
its connections open: the scheduler lists it for minutes, and every call to it
waits out its own timeout. The driver sends each shard a cheap call once a
``period`` and never waits for it; a call unanswered for ``timeout`` seconds
counts the shard silent, and the job treats its worker as dead
(``drop_hung``: Downpour's shards come back from their checkpoint, Sandblaster's
too). A shard's call returns a future-like object or, in process, its answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ..ps import ShardedParameters
from ..telemetry import EventStream, WorkerHung
from .session import Cluster


@dataclass
class Ping:
    """One call under way: to which shard object, answered by ``call``, sent at ``sent``."""

    shard: Any
    call: Any
    sent: float


class Heartbeat:
    """Pings each shard every ``period`` seconds; counts silent one that leaves a ping unanswered ``timeout`` s."""

    def __init__(self, timeout: float, period: float = 1.0, clock: Any = time.monotonic) -> None:
        self.timeout, self.period, self.clock = timeout, period, clock
        self._pings: dict[int, Ping] = {}
        self._answered: dict[int, float] = {}
        self._silent: set[int] = set()

    def beat(self, server: ShardedParameters) -> list[int]:
        """Send the pings due and look at those under way; returns the shards newly found silent."""
        now, silent = self.clock(), []
        for i, shard in enumerate(server.shards):
            ping = self._pings.get(i)
            if ping is not None and ping.shard is not shard:  # the shard was replaced: start afresh
                ping = None
                self._pings.pop(i, None)
                self._silent.discard(i)
            if ping is not None:
                if _done(ping.call):
                    self._pings.pop(i)
                    self._answered[i] = now
                elif now - ping.sent > self.timeout:
                    if i not in self._silent:
                        self._silent.add(i)
                        silent.append(i)
                    continue
                else:
                    continue
            if now - self._answered.get(i, -float("inf")) >= self.period:
                try:
                    self._pings[i] = Ping(shard, shard.ping(), now)
                except Exception:  # noqa: BLE001 - its worker is known lost already: that is the monitor's to handle
                    continue
        return silent


def _done(call: Any) -> bool:
    done = getattr(call, "done", None)
    return bool(done()) if callable(done) else True


def drop_hung(cluster: Cluster, events: EventStream, server: ShardedParameters, silent: list[int],
              timeout: float) -> list[str]:
    """The workers of shards ``silent`` that the scheduler still lists (a machine that stopped, not one
    that died): each recorded (``WorkerHung``) and dropped from the scheduler, its connections closed, so
    that calls waiting on it fail now and its shards are lost as with a dead machine. Returns them."""
    hung: dict[str, list[int]] = {}
    for i in silent:
        hung.setdefault(server.workers[i], []).append(i)
    listed = set(cluster.workers())
    dropped = []
    for worker, shards in hung.items():
        if worker in listed:
            events.emit(WorkerHung, worker=worker, silent=timeout, shards=tuple(shards))
            cluster.drop_worker(worker)
            dropped.append(worker)
    return dropped
