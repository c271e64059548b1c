"""A heartbeat to every parameter shard, so that a machine that stops answering is noticed.

A stopped or wedged machine (SIGSTOP, a kernel stall, swapping to death) keeps
its connections open: the scheduler lists it for minutes, and every call to it
waits out its own timeout. The driver sends each shard a cheap call once a
``period`` and never waits for it; a call unanswered for ``timeout`` seconds
counts the shard silent, and the job treats its worker as dead
(``drop_hung``: Downpour's shards come back from their checkpoint, Sandblaster's
too). A call answered late, after a silence shorter than ``timeout`` (a network
partition that healed, a long pause), is recorded too (``note_late``): the job
kept the machine, and its report says how long it was away. A shard's call
returns a future-like object or, in process, its answer.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from ..ps import ShardedParameters
from ..runtime.protocol import Runtime
from ..telemetry import EventStream, WorkerHung, WorkerSilent


@dataclass
class Ping:
    """One call under way: to which object, answered by ``call``, sent at ``sent``."""

    target: Any
    call: Any
    sent: float


@dataclass(frozen=True)
class Late:
    """Target ``key`` answered a ping ``silent`` seconds after it was sent (at least the heartbeat's ``late``,
    less than its ``timeout``)."""

    key: Hashable
    silent: float


class Heartbeat:
    """Pings each target (a shard, a partition: anything with ``ping()``) every ``period`` seconds; counts
    silent one that leaves a ping unanswered ``timeout`` s, and late one that answers after ``late`` s
    (default: a third of ``timeout``, at least two periods). Targets are keyed (a shard's index, a
    partition's name); a key whose object changes (a restored shard) starts afresh. One thread beats it."""

    def __init__(self, timeout: float, period: float = 1.0, clock: Any = time.monotonic,
                 late: float | None = None) -> None:
        self.timeout, self.period, self.clock = timeout, period, clock
        self.late = max(2 * period, timeout / 3) if late is None else late
        self._pings: dict[Hashable, Ping] = {}
        self._answered: dict[Hashable, float] = {}
        self._silent: set[Hashable] = set()
        self._late: list[Late] = []

    def beat(self, targets: dict[Hashable, Any]) -> list[Hashable]:
        """Send the pings due and look at those under way; returns the keys newly found silent."""
        now, silent = self.clock(), []
        for key in [k for k in self._pings if k not in targets]:  # gone (released, re-laid out)
            self._pings.pop(key)
            self._silent.discard(key)
        for key, target in targets.items():
            ping = self._pings.get(key)
            if ping is not None and ping.target is not target:  # replaced: start afresh
                ping = None
                self._pings.pop(key, None)
                self._silent.discard(key)
            if ping is not None:
                if _done(ping.call):
                    self._pings.pop(key)
                    self._answered[key] = now
                    if now - ping.sent >= self.late and key not in self._silent:
                        self._late.append(Late(key, now - ping.sent))
                elif now - ping.sent > self.timeout and key not in self._silent:
                    self._silent.add(key)
                    silent.append(key)
                continue
            if now - self._answered.get(key, -float("inf")) >= self.period:
                try:
                    self._pings[key] = Ping(target, target.ping(), now)
                except Exception:  # noqa: BLE001 - its worker is known lost already: that is the monitor's to handle
                    continue
        return silent

    def answered_late(self) -> list[Late]:
        """The late answers since the last call (each once)."""
        late, self._late = self._late, []
        return late

    def clear(self) -> None:
        """Forget every ping under way: each holds its target's proxy, which would keep the actor alive."""
        self._pings.clear()
        self._answered.clear()
        self._silent.clear()
        self._late.clear()

    def beat_shards(self, server: ShardedParameters) -> list[int]:
        """``beat`` over the shards of ``server``; the indices of those newly silent."""
        return [int(k) for k in self.beat(dict(enumerate(server.shards)))]  # type: ignore[call-overload]


def _done(call: Any) -> bool:
    done = getattr(call, "done", None)
    return bool(done()) if callable(done) else True


def drop_hung(cluster: Runtime, events: EventStream, hung: dict[str, tuple[int, ...]], timeout: float) -> list[str]:
    """The workers of ``hung`` (worker -> its silent shards, maybe none: a partition's) that the scheduler
    still lists (a machine that stopped, not one that died): each recorded (``WorkerHung``) and dropped
    from the scheduler, its connections closed, so that calls waiting on it fail now and what it held is
    lost as with a dead machine. Returns them."""
    listed = set(cluster.workers())
    dropped = []
    for worker, shards in hung.items():
        if worker in listed:
            events.emit(WorkerHung, worker=worker, silent=timeout, shards=tuple(shards))
            cluster.drop_worker(worker)
            dropped.append(worker)
    return dropped


def note_late(events: EventStream, late: dict[str, tuple[float, tuple[int, ...]]]) -> None:
    """A ``WorkerSilent`` for each worker of ``late`` (worker -> (its longest silence, its shards among the
    late targets)): it stopped answering for less than the heartbeat's timeout and came back, and the job
    kept it."""
    for worker, (silent, shards) in late.items():
        events.emit(WorkerSilent, worker=worker, silent=round(silent, 3), shards=shards)


def late_by_worker(late: list[Late], worker_of: dict[Hashable, str]) -> dict[str, tuple[float, tuple[int, ...]]]:
    """``late`` answers by worker (``worker_of``: target key -> its worker; keys it lacks are skipped): each
    worker's longest silence and the shards (integer keys) among its late targets."""
    out: dict[str, tuple[float, tuple[int, ...]]] = {}
    for answer in late:
        worker = worker_of.get(answer.key)
        if worker is None:
            continue
        silent, shards = out.get(worker, (0.0, ()))
        more = (answer.key,) if isinstance(answer.key, int) else ()
        out[worker] = (max(silent, answer.silent), tuple(sorted(shards + more)))
    return out


def workers_of_shards(server: ShardedParameters, silent: list[int]) -> dict[str, tuple[int, ...]]:
    """Worker -> which of the shards ``silent`` it holds."""
    out: dict[str, list[int]] = {}
    for i in silent:
        out.setdefault(server.workers[i], []).append(i)
    return {w: tuple(v) for w, v in out.items()}
