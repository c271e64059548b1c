"""How a wired partition's messages travel: to each partner an end, into each partition's mailbox.

A partner on another worker is reached over the boundary wire
(``boundary_wire.BoundaryEnd``); a partner in the same process is handed the
slice in memory (``InMemoryEnd``), as a colocated shard is called in process:
K partitions on one multi-core worker are then the paper's multithreaded
partitions (Sec. 3). What arrives goes to the mailbox (``mailbox``), which the
waiting thread reads. A partition that follows a lead has a thread of its own
that takes each ``go`` and runs it (``serve``); the lead's steps run on its
caller's thread.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..ps.records import WireAddress
from ..ps.wire_doors import close_door, open_door
from ..ps.wire_server import WireServer
from .boundary_frames import Key
from .mailbox import Mailbox

OnOrder = Callable[[int, int, dict], None]  # sender, order number, orders


class End(Protocol):
    def send(self, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None: ...

    def close(self) -> None: ...


class BoundaryLink:
    """Partition ``index``'s mailbox, its door on its process's wire (on ``host``, if given), its ends to its
    partners and, with ``on_order`` (a partition that follows a lead), the thread that runs each order."""

    def __init__(self, index: int, timeout: float, host: str | None = None,
                 on_order: OnOrder | None = None) -> None:
        self.index = index
        self.mailbox = Mailbox(index, timeout)
        self.ends: dict[int, End] = {}
        self._orders = 0  # orders given as its replica's lead (``dbkit.partition.lead``)
        # a door on this process's wire: partners on other workers connect there (``dbkit.ps.wire_doors``)
        self._door = None if host is None else open_door(host, self.mailbox.add_connection)
        self._server: threading.Thread | None = None
        if on_order is not None:
            # weakly: the thread would otherwise keep the partition alive after Dask drops it
            ref = weakref.WeakMethod(on_order) if hasattr(on_order, "__self__") else (lambda: on_order)
            self._server = threading.Thread(target=_serve, args=(self.mailbox, ref), daemon=True,
                                            name=f"dbkit-partition-{index}-follows")
            self._server.start()

    @property
    def wire(self) -> WireServer | None:
        """The process's wire its door is on (``None``: partners in this process only)."""
        return None if self._door is None else self._door[0]

    @property
    def address(self) -> WireAddress | None:
        return None if self._door is None else self._door[1]

    def next_order(self) -> int:
        """A new number for an order this partition gives as its replica's lead (one thread leads)."""
        self._orders += 1
        return self._orders

    def connect(self, ends: dict[int, End]) -> None:
        for end in self.ends.values():
            end.close()
        self.ends = dict(ends)

    def arrive(self, sender: int, key: Key, values: np.ndarray | None, meta: dict[str, Any] | None) -> None:
        """A slice or an order from a partner in this process."""
        self.mailbox.put(key, values, meta, sender)

    def post(self, to: int, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None:
        self.ends[to].send(key, values, meta)

    def close(self) -> None:
        """Close its door, every end and connection, and let the serving thread end. Safe to call twice."""
        door, self._door = self._door, None
        if door is not None:
            close_door(*door)
        self.mailbox.shut()
        for end in self.ends.values():
            end.close()
        self.ends = {}
        if self._server is not None and self._server is not threading.current_thread():
            self._server.join(5.0)


def _serve(mailbox: Mailbox, on_order: Callable[[], OnOrder | None]) -> None:
    """A following partition's thread: wait for each ``go`` and run it here (its waits read the connections
    on this same thread), until the mailbox closes."""
    while mailbox.closed is None:
        order = mailbox.next_order(1.0)
        if order is None:
            continue
        fn = on_order()
        if fn is None:  # the partition is gone
            return
        fn(*order)
        del fn


class InMemoryEnd:
    """Partition ``sender``'s end to a partner in the same process: a call, no copy, no socket."""

    def __init__(self, partner: BoundaryLink, sender: int) -> None:
        self._partner, self.sender = partner, sender

    def send(self, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None:
        self._partner.arrive(self.sender, key, values, meta)

    def close(self) -> None:
        pass
