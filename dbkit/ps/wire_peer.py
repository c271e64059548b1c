"""One peer of a process's wire (``wire_server``): the frame it is reading, the replies it waits for.

A peer is a small state machine: it reads its next frame into ``view`` (filled
up to ``got``), then calls ``then(view)``, which decides what the next frame
is; replies wait in ``out`` until the socket takes them. A wired partition's
partner is handed to its partition once greeted (``handed``) and read there.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Callable

import numpy as np

from .wire_frames import WireError

Accepted = Callable[[int, socket.socket], None]  # a wired partition's door: (the partner's index, its connection)


class Peer:
    """One connection to the wire: who it is once it has shown a token, and what it reads and sends."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock, self.deadline = sock, deadline
        self.stranger, self.closing = True, False
        self.key: str | None = None
        self.pusher: str | None = None
        self.door: Accepted | None = None  # a wired partition's: the connection is handed to it once greeted
        self.handed: tuple[int, Accepted] | None = None
        self.landing: np.ndarray | None = None
        self.view = memoryview(bytearray(0))
        self.got = 0
        self.then: Callable[[memoryview], None] = lambda _: None
        self.out: deque[memoryview] = deque()

    def expect(self, view: memoryview, then: Callable[[memoryview], None]) -> None:
        self.view, self.got, self.then = view, 0, then

    def expect_bytes(self, n: int, then: Callable[[memoryview], None]) -> None:
        self.expect(memoryview(bytearray(n)), then)

    def receive(self) -> None:
        """Take what has arrived into the frame under way, finishing frames as they fill; ``WireError`` if the
        peer closed."""
        while not self.closing and self.handed is None:
            if self.got < len(self.view):
                try:
                    k = self.sock.recv_into(self.view[self.got:])
                except (BlockingIOError, InterruptedError):
                    return
                if k == 0:
                    raise WireError("the peer closed the connection")
                self.got += k
                if self.got < len(self.view):
                    continue
            self.then(self.view)
