"""A heartbeat to every parameter shard, so that a machine that stops answering is noticed.

A stopped or wedged machine (SIGSTOP, a kernel stall, swapping to death) keeps
its connections open: the scheduler lists it for minutes, and every call to it
waits out its own timeout. The driver sends each shard a cheap call once a
``period`` and never waits for it; a call unanswered for ``timeout`` seconds
marks the shard lost (``LastRead.mark_lost``), and the job then treats its
worker as dead (``DownpourSGD._drop_hung``). No Dask import: a shard's call
returns a future-like object or, in process, its answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...ps import ShardedParameters
from .last_read import LastRead


@dataclass
class Ping:
    """One call under way: to which shard object, answered by ``call``, sent at ``sent``."""

    shard: Any
    call: Any
    sent: float


class Heartbeat:
    """Pings each shard every ``period`` seconds; marks lost one that leaves a ping unanswered ``timeout`` s."""

    def __init__(self, timeout: float, period: float = 1.0, clock: Any = time.monotonic) -> None:
        self.timeout, self.period, self.clock = timeout, period, clock
        self._pings: dict[int, Ping] = {}
        self._answered: dict[int, float] = {}

    def beat(self, server: ShardedParameters, last_read: LastRead) -> list[int]:
        """Send the pings due and look at those under way; returns the shards newly found silent."""
        now, silent = self.clock(), []
        for i, shard in enumerate(server.shards):
            ping = self._pings.get(i)
            if ping is not None and ping.shard is not shard:  # the shard was replaced: start afresh
                ping = None
                self._pings.pop(i, None)
            if ping is not None:
                if _done(ping.call):
                    self._pings.pop(i)
                    self._answered[i] = now
                elif now - ping.sent > self.timeout:
                    if i not in last_read.lost:
                        last_read.mark_lost(i, f"no answer to a heartbeat for {now - ping.sent:.0f}s: its machine "
                                               "is hung")
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
