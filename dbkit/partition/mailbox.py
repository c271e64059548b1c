"""A wired partition's mailbox: boundary slices and a lead's orders, read from its connections by the
thread that waits for them.

A wired partition's step runs whole on one thread, as the paper's partitions
compute and pass messages (Sec. 3). The thread that waits for a slice reads
its partners' connections itself (``select`` over them, then whole frames),
as a bare process would: no reader thread hands each slice on, so a
message costs a system call, not a thread switch. What another partner sent
meanwhile waits in the mailbox under its key; a partner in the same process
puts its slices there directly and wakes the reader through a socket pair.
One thread reads at a time; another one waiting is handed its letters.
Every wait is bounded; ``close`` (a partner gone, the step aborted) ends every
wait at once, and every later one, with the reason.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from ..ps.wire_frames import WireError
from .boundary_frames import FrameReader, Key

Letter = tuple[np.ndarray | None, dict[str, Any] | None]  # values, and the JSON that came with them
Order = tuple[int, int, dict[str, Any]]  # a lead's ``go``: sender, order number, orders


class Mailbox:
    """Messages by key for partition ``index``, and its connections; a silent partner is taken as lost after
    ``timeout`` seconds."""

    def __init__(self, index: int, timeout: float) -> None:
        self.index, self.timeout = index, float(timeout)
        # lock order: a leaf, taken inside _reading (letters, orders, connections, the reason it closed)
        self._cond = threading.Condition(threading.Lock())
        # lock order: before _cond (held by the one thread reading the connections, while it reads)
        self._reading = threading.Lock()
        self._letters: dict[Key, Letter] = {}
        self._orders: deque[Order] = deque()
        self._waiting: set[Key] = set()
        self._connections: dict[socket.socket, tuple[int, FrameReader]] = {}  # a partner's connection -> its
        # partition index, and what has arrived on it
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selecting = False  # a reader sleeps in select: wake it with a byte
        self._delivered = 0  # letters and orders delivered so far: a reader about to sleep looks at it first
        self.closed: str | None = None

    # ---- what arrives ---------------------------------------------------------------------------
    def add_connection(self, sender: int, conn: socket.socket) -> None:
        """A partner's connection (its token checked): read from now on."""
        conn.settimeout(None)
        with self._cond:
            if self.closed is not None:
                conn.close()
                return
            self._connections[conn] = (sender, FrameReader(conn))
            self._wake()

    def put(self, key: Key, values: np.ndarray | None, meta: dict[str, Any] | None = None, sender: int = -1) -> None:
        """A letter (or a lead's ``go``) from a partner in this process."""
        with self._cond:
            self._deliver(key, values, meta, sender)
            self._wake()

    def _order(self, sender: int, n: int, orders: dict[str, Any]) -> None:
        """(``_cond`` held.)"""
        if orders.get("op") == "stop":
            if self.closed is None:
                self.closed = str(orders.get("reason", "stopped by the lead partition"))
        else:
            self._orders.append((sender, n, orders))

    def _deliver(self, key: Key, values: np.ndarray | None, meta: dict[str, Any] | None, sender: int) -> None:
        """(``_cond`` held.) A lead's ``stop``, or a partner's failure, closes the mailbox at once: the step
        waiting here ends."""
        if key[1] == "go":
            self._order(sender, key[0], meta or {})
        elif key[1] == "done" and meta and "error" in meta and self.closed is None:
            # a partner failed: its slices will not come, so no wait here should go on for them
            self.closed = f"partition {key[2]} failed: {meta['error']}"
        else:
            self._letters[key] = (values, meta)
        self._delivered += 1
        self._cond.notify_all()

    def _wake(self) -> None:
        """(``_cond`` held.) Wake a reader sleeping in ``select``."""
        if self._selecting:
            try:
                self._wake_w.send(b"\0")
            except OSError:  # BlockingIOError: a wake-up is already waiting to be read
                pass

    # ---- waiting ----------------------------------------------------------------------------------
    def take(self, key: Key) -> Letter:
        """The letter ``key``, waiting for it up to ``timeout`` seconds."""
        with self._cond:
            self._waiting.add(key)
        try:
            found = self._wait(lambda: self._letters.pop(key, None), self.timeout)
        finally:
            with self._cond:
                self._waiting.discard(key)
        if found is not None:
            return found
        if self.closed is not None:
            raise RuntimeError(f"partition {self.index} stopped waiting for {key[1:]}: {self.closed}")
        raise TimeoutError(f"partition {self.index} waited {self.timeout:.0f}s for {key[1:]} from a partner: "
                           "is its worker alive?")

    def next_order(self, timeout: float) -> Order | None:
        """A lead's next ``go``, if one comes within ``timeout`` seconds (``None`` also once closed)."""
        return self._wait(lambda: self._orders.popleft() if self._orders else None, timeout)

    def _wait(self, ready, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                found = ready()
                if found is not None or self.closed is not None:
                    return found
                seen = self._delivered
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self._reading.acquire(blocking=False):
                try:
                    self._read(remaining, seen)
                finally:
                    self._reading.release()
                    with self._cond:
                        self._cond.notify_all()  # a thread waiting below may read now
            else:
                with self._cond:  # another thread reads: it hands this one its letters
                    if self.closed is None:
                        self._cond.wait(min(remaining, 0.05))

    def _read(self, remaining: float, seen: int) -> None:
        """Wait up to ``remaining`` seconds for something to read (a frame, or a wake-up), and read it: the
        caller then looks again for what it waits for. A frame already received (behind the last one read)
        is read first, with no wait; if anything was delivered since the caller looked (``seen``), nothing
        is waited for: a partner's ``put`` in that gap found no reader in ``select`` to wake."""
        with self._cond:
            if self.closed is not None or self._delivered != seen:
                return
            connections = list(self._connections.items())
            self._selecting = True
        try:
            readable: list = [conn for conn, (_, reader) in connections if reader.buffered]
            if not readable:
                readable = select.select([self._wake_r, *(c for c, _ in connections)], [], [], remaining)[0]
        except (OSError, ValueError):  # a connection closed under us: the mailbox is closing
            readable = []
        finally:
            with self._cond:
                self._selecting = False
        for conn in readable:
            if conn is self._wake_r:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:  # BlockingIOError: drained
                    pass
            else:
                self._read_frame(conn)

    def _read_frame(self, conn: socket.socket) -> None:
        sender, reader = self._connections.get(conn, (-1, None))
        if reader is None:  # closed meanwhile
            return
        try:
            key, values, meta = reader.read()
        except (OSError, WireError, ValueError) as e:
            with self._cond:
                self._connections.pop(conn, None)
            conn.close()
            self.close(f"partition {sender}'s connection ended ({type(e).__name__}: {e})")
            return
        with self._cond:
            self._deliver(key, values, meta, sender)

    # ---- ending ------------------------------------------------------------------------------------
    def close(self, reason: str) -> int:
        """End every wait, now and later, with ``reason``; returns the waits ended."""
        with self._cond:
            if self.closed is None:
                self.closed = str(reason)
            waiting = len(self._waiting)
            self._cond.notify_all()
            self._wake()
            return waiting

    def shut(self) -> None:
        """Close, and close every connection (the partition is released)."""
        self.close("its partition was closed")
        with self._cond:
            conns, self._connections = list(self._connections), {}
        with self._reading:  # no reader is in select on them any more
            for conn in conns:
                conn.close()
            self._wake_r.close()
            self._wake_w.close()

    def waiting(self) -> list[Key]:
        with self._cond:
            return sorted(self._waiting, key=repr)
