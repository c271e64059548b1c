"""How a wired partition's messages travel: to each partner an end, into each partition's mailbox.

A partner on another worker is reached over the boundary wire
(``boundary_wire.BoundaryEnd``); a partner in the same process is handed the
slice in memory (``InMemoryEnd``), as a colocated shard is called in process:
K partitions on one multi-core worker are then the paper's multithreaded
partitions (Sec. 3). What arrives goes to the mailbox, except a lead's
``go`` (start a step), which goes to ``on_go``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..ps.records import WireAddress
from .boundary_frames import Key
from .boundary_wire import BoundaryListener
from .mailbox import Mailbox

OnGo = Callable[[int, int, dict], None]  # sender, step, orders


class End(Protocol):
    def send(self, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None: ...

    def close(self) -> None: ...


class BoundaryLink:
    """Partition ``index``'s mailbox, its listener (on ``host``, if given) and its ends to its partners."""

    def __init__(self, index: int, timeout: float, on_go: OnGo, host: str | None = None) -> None:
        self.index = index
        self.mailbox = Mailbox(index, timeout)
        # weakly: the listener's threads would otherwise keep the partition alive after Dask drops it
        self._on_go = weakref.WeakMethod(on_go) if hasattr(on_go, "__self__") else (lambda: on_go)
        self.ends: dict[int, End] = {}
        self.listener: BoundaryListener | None = None
        if host is not None:
            me = weakref.ref(self)
            self.listener = BoundaryListener(index, lambda *a: _call(me, "arrive", *a),
                                             lambda *a: _call(me, "lost", *a), host)

    @property
    def address(self) -> WireAddress | None:
        return None if self.listener is None else self.listener.address

    def connect(self, ends: dict[int, End]) -> None:
        for end in self.ends.values():
            end.close()
        self.ends = dict(ends)

    def arrive(self, sender: int, key: Key, values: np.ndarray | None, meta: dict[str, Any] | None) -> None:
        if key[1] == "go":
            on_go = self._on_go()
            if on_go is not None:
                on_go(sender, key[0], meta or {})
            return
        self.mailbox.put(key, values, meta)

    def lost(self, sender: int, reason: str) -> None:
        self.mailbox.close(reason)

    def post(self, to: int, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None:
        self.ends[to].send(key, values, meta)

    def close(self) -> None:
        """Stop listening and close every end; waits still running end. Safe to call twice."""
        self.mailbox.close("its partition was closed")
        if self.listener is not None:
            self.listener.close()
        for end in self.ends.values():
            end.close()
        self.ends = {}


class InMemoryEnd:
    """Partition ``sender``'s end to a partner in the same process: a call, no copy, no socket."""

    def __init__(self, partner: BoundaryLink, sender: int) -> None:
        self._partner, self.sender = partner, sender

    def send(self, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None:
        self._partner.arrive(self.sender, key, values, meta)

    def close(self) -> None:
        pass


def _call(ref: weakref.ref, method: str, *args: Any) -> None:
    link = ref()
    if link is not None:
        getattr(link, method)(*args)
