"""The shards of one process served over plain sockets, for the bulk arrays of fetch and push.

DistBelief's replicas talk to the parameter server shards directly, many at
once (paper Sec. 4.1). On Dask each call to a shard actor costs about 0.5 ms
of CPU on each side before any byte moves, and more per megabyte than the
socket does (``docs/benchmarks.md``, issue #12): with both cores computing,
that CPU is taken from a replica. A ``WireServer`` lets a replica reach the
shards of another process over its own TCP connection, one per (replica,
shard), at the raw socket's cost. Dask still places the shards and finds
them; everything but fetch and push still goes to the actor.

One thread serves every connection of the process (``wire_loop``, which also
carries the process's calls to other shards): a
connection is a small state machine reading its next frame into a buffer and
sending its replies when the socket takes them, so a thousand replicas, or a
thousand strangers, hold no thread each. A connection must open with the
server's token (``WireAddress.token``, which the driver reads through Dask and
gives only to its replicas) within ``hello_timeout`` and names its shard by
key; the server looks the key up on every request, so a shard released from
the process is gone for its connections too. Nothing received is unpickled.

The same loop greets a wired partition's partners (``add_door``): a
connection that shows a partition's own token is answered and handed to that
partition's mailbox, which reads its frames from then on. One listener and
one loop per process greet every peer, so strangers, however many, never
hold a partner up (issue #48); ``wire_doors`` finds the process's server.
A peer (``Peer``) is a small state machine: it reads its next frame into
``view`` (filled up to ``got``), then calls ``then(view)``, which decides what
the next frame is; replies wait in ``out`` until the socket takes them. No Dask
import.
"""

from __future__ import annotations

import dataclasses
import functools
import hmac
import json
import logging
import secrets
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from .records import WireAddress
from .wire_frames import ERROR, FETCH, FRAME, HELLO, OK, PUSH, PUSH_FETCH, WireError, float_count, recv_some, tune
from .wire_loop import WireLoop

Accepted = Callable[[int, socket.socket], None]  # a wired partition's door: (the partner's index, its connection)


class Peer:
    """One connection to the wire: who it is once it has shown a token, and what it reads and sends."""

    def __init__(self, sock: socket.socket, deadline: float, host: str = "") -> None:
        self.sock, self.deadline, self.host = sock, deadline, host  # host: the address it came from
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
                k = recv_some(self.sock, self.view[self.got:])
                if k is None:
                    return
                self.got += k
                if self.got < len(self.view):
                    continue
            self.then(self.view)

HELLO_TIMEOUT = 10.0  # seconds a new connection has to show the token
MAX_STRANGERS = 1024  # connections at once that have not shown it yet; one more drops the oldest of them
#: strangers at once from one address: one more from there drops that address's oldest, so a flood from one host
#: cannot push out the connections of others still showing their token (a multi-host cluster's wire listens on
#: the worker's own address, which any host on the network can reach)
MAX_STRANGERS_PER_ADDRESS = 256
#: refusals after which a server says, once, that strangers are reaching it
FLOOD = 32
log = logging.getLogger("dbkit.wire")


class WireServer:
    """Serve ``fetch``, ``push`` and ``push_fetch`` of the shards ``lookup(key)`` finds, on ``host``.

    Parameters
    ----------
    lookup : callable
        ``key -> shard or None``: the shards of this process (on Dask, the
        worker's actors).
    host : str
        The interface to listen on: the one the worker itself listens on.
    hello_timeout : float
        Seconds a new connection has to show the token; then it is closed.
    max_strangers : int
        Connections at once that have not yet shown the token; one more drops the oldest of them, so idle
        strangers can neither exhaust the process's files nor keep a replica out.
    max_strangers_per_address : int
        Of those, from one address: one more from there drops that address's oldest instead.
    """

    def __init__(self, lookup: Callable[[str], Any], host: str = "127.0.0.1", hello_timeout: float = HELLO_TIMEOUT,
                 max_strangers: int = MAX_STRANGERS, ends_with_doors: bool = False,
                 max_strangers_per_address: int = MAX_STRANGERS_PER_ADDRESS) -> None:
        self._lookup, self.host = lookup, host
        self._doors: dict[bytes, Accepted] = {}  # a wired partition's token -> where its connections go
        self._ends_with_doors = ends_with_doors  # started for partitions only: closes with the last one
        self.hello_timeout, self.max_strangers = float(hello_timeout), int(max_strangers)
        self.max_strangers_per_address = min(self.max_strangers, int(max_strangers_per_address))
        self.refused = 0  # connections closed for want of a token: wrong, late, or dropped for a newer one
        self._turned_away = 0  # of them, those the wire closed itself (late, or dropped): a flood is said once
        self.requests = 0  # fetches and pushes served (for tests and benchmarks)
        self._token = secrets.token_bytes(16)
        self._listener = socket.create_server((host, 0))
        self._listener.setblocking(False)
        self.address = WireAddress(host, self._listener.getsockname()[1], self._token.hex())
        # lock order: leaf (the open connections, read by ``connections`` from other threads)
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, Peer] = {}  # in the order they came: strangers oldest first
        self._peers: dict[str, int] = {}  # the address each connection that showed a token came from -> how many
        self._closed = False
        self._loop = WireLoop.join()
        self._loop.call_soon(self._open)

    # ---- on the process's wire loop --------------------------------------------------------------------------
    def _open(self) -> None:
        self._loop.register(self._listener, lambda _: self._accept())
        self._loop.add_tick(self._expire)

    def _serve(self, c: Peer, events: int) -> None:
        try:
            if events & selectors.EVENT_READ and not c.closing:
                c.receive()
            if events & selectors.EVENT_WRITE or c.out:
                self._send(c)
        except (OSError, WireError, ValueError):  # ValueError: a key that is not UTF-8
            self._drop(c)  # the peer went away or broke the protocol; the shard is untouched

    def _shut(self, done: threading.Event) -> None:
        self._loop.remove_tick(self._expire)
        self._loop.unregister(self._listener)
        self._listener.close()
        for c in list(self._connections.values()):
            self._drop(c, refused=False)
        done.set()

    def _accept(self) -> None:
        while True:
            try:
                sock, where = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the listener closed
                return
            sock.setblocking(False)
            tune(sock)
            host = str(where[0]) if isinstance(where, tuple) and where else ""
            c = Peer(sock, time.monotonic() + self.hello_timeout, host)
            strangers = [s for s in self._connections.values() if s.stranger]
            same = [s for s in strangers if s.host == host]
            if len(same) >= self.max_strangers_per_address:  # a flood from one address crowds out only its own
                self._turn_away(same[0])
            elif len(strangers) >= self.max_strangers:
                self._turn_away(strangers[0])
            c.expect_bytes(HELLO.size, self._hello_of(c))
            with self._lock:
                self._connections[sock] = c
            self._loop.register(sock, functools.partial(self._serve, c))

    def _send(self, c: Peer) -> None:
        """Send what the socket takes now; wait for it to take more, or close once a last reply is out."""
        while c.out:
            try:
                k = c.sock.send(c.out[0])
            except (BlockingIOError, InterruptedError):
                break
            c.out[0] = c.out[0][k:]
            if not len(c.out[0]):
                c.out.popleft()
        if not c.out and c.closing:
            self._drop(c, refused=False)
            return
        if not c.out and c.handed is not None:
            self._hand(c, *c.handed)
            return
        self._loop.want_write(c.sock, bool(c.out))

    def _expire(self, now: float) -> None:
        for c in [c for c in self._connections.values() if c.stranger and c.deadline <= now]:
            self._turn_away(c)

    def _turn_away(self, c: Peer) -> None:
        """Close a stranger the wire gives up on (too slow, or dropped for a newer one); the first ``FLOOD`` of
        them are said once, as one warning (not one per connection)."""
        self._drop(c)
        self._turned_away += 1
        if self._turned_away == FLOOD:
            log.warning("dbkit wire on %s:%d: %d connections without the token turned away (too slow to show it, "
                        "or dropped for newer ones); replicas holding it are served first. Strangers are reaching "
                        "this worker's port", self.host, self.address.port, FLOOD)

    def _drop(self, c: Peer, refused: bool = True) -> None:
        with self._lock:
            if self._connections.pop(c.sock, None) is None:
                return
        if c.stranger and refused:
            self.refused += 1
        self._loop.unregister(c.sock)
        c.sock.close()

    def _hand(self, c: Peer, sender: int, accepted: Accepted) -> None:
        """The greeted partner's connection goes to its partition, which reads it from now on."""
        with self._lock:
            self._connections.pop(c.sock, None)
        self._loop.unregister(c.sock)
        c.sock.setblocking(True)
        accepted(sender, c.sock)

    # ---- the frames --------------------------------------------------------------------------------------
    def _reply(self, c: Peer, meta: dict[str, Any], values: np.ndarray | None = None, status: int = OK,
               last: bool = False) -> None:
        """Queue one reply (header, JSON ``meta``, raw float32 ``values``); ``last``: then close."""
        body = json.dumps(meta).encode()
        payload = 0 if values is None else values.nbytes
        c.out.append(memoryview(FRAME.pack(status, 0, 0, 0, 0, len(body), payload) + body))
        if payload:
            c.out.append(np.ascontiguousarray(values, dtype=np.float32).data.cast("B"))
        c.closing = c.closing or last
        self._send(c)

    def _hello_of(self, c: Peer) -> Callable[[memoryview], None]:
        return lambda view: self._hello(c, bytes(view))

    def _hello(self, c: Peer, hello: bytes) -> None:
        """The token first, then (only for the token's holder) anything decoded; a stranger is answered and
        dropped before any of its bytes are read as text."""
        token, key_len, pusher_len = HELLO.unpack(hello)
        with self._lock:
            doors = list(self._doors.items())
        c.door = next((door for known, door in doors if hmac.compare_digest(token, known)), None)
        if c.door is None and not hmac.compare_digest(token, self._token):
            self.refused += 1
            c.stranger = False  # (counted: its last reply goes out, then it closes)
            self._reply(c, {"error": "wrong token: this wire serves only its own job's replicas"}, status=ERROR,
                        last=True)
            return
        c.stranger = False
        try:
            host = str(c.sock.getpeername()[0])
        except OSError:  # it went away already: its next read ends it
            host = "?"
        with self._lock:
            self._peers[host] = self._peers.get(host, 0) + 1
        c.expect_bytes(key_len + pusher_len, lambda view: self._named(c, bytes(view), key_len))
        if key_len + pusher_len == 0:
            c.then(c.view)

    def _named(self, c: Peer, names: bytes, key_len: int) -> None:
        c.key, c.pusher = names[:key_len].decode(), names[key_len:].decode() or None
        if c.door is not None:  # a wired partition's partner, named by its index
            if not (c.pusher or "").isdigit():
                raise WireError(f"a partition's partner named {c.pusher!r}, not by its index")
            c.handed = (int(c.pusher or 0), c.door)
            self._reply(c, {"partition": True})
            return
        shard = self._lookup(c.key)
        if shard is None:
            self._reply(c, {"error": f"no shard {c.key} in this process"}, status=ERROR, last=True)
            return
        c.expect_bytes(FRAME.size, lambda view: self._request(c, bytes(view)))
        self._reply(c, {"size": int(shard.size)})

    def _request(self, c: Peer, header: bytes) -> None:
        op, version, first, examples, _, meta_len, nbytes = FRAME.unpack(header)
        self.requests += 1
        assert c.key is not None
        shard = self._lookup(c.key)
        if shard is None:
            self._reply(c, {"error": f"shard {c.key} is gone from this process"}, status=ERROR, last=True)
            return
        if op not in (FETCH, PUSH, PUSH_FETCH) or meta_len:
            self._reply(c, {"error": f"unknown operation {op}" if not meta_len else "a request with JSON"},
                        status=ERROR, last=True)
            return
        c.expect_bytes(FRAME.size, lambda view: self._request(c, bytes(view)))
        if op == FETCH:
            version, values = shard.fetch()
            self._reply(c, {"version": int(version)}, values)
            return
        n = float_count(nbytes, 4 * shard.size)
        if c.landing is None or len(c.landing) != shard.size:
            c.landing = np.empty(shard.size, dtype=np.float32)
        grad = c.landing[:n]
        c.expect(grad.data.cast("B"), lambda _: self._push(c, op, grad, version, first, examples))
        if n == 0:
            c.then(c.view)

    def _push(self, c: Peer, op: int, grad: np.ndarray, version: int, first: int, examples: int) -> None:
        c.expect_bytes(FRAME.size, lambda view: self._request(c, bytes(view)))
        assert c.key is not None
        shard = self._lookup(c.key)
        if shard is None:
            self._reply(c, {"error": f"shard {c.key} is gone from this process"}, status=ERROR, last=True)
            return
        try:
            if op == PUSH:
                answer = shard.push(grad, version, c.pusher, examples, first)
                self._reply(c, {"answer": dataclasses.asdict(answer)})
            else:
                answer, version, values = shard.push_fetch(grad, version, c.pusher, examples, first)
                self._reply(c, {"answer": dataclasses.asdict(answer), "version": int(version)}, values)
        except (OSError, WireError):
            raise
        except Exception as e:  # noqa: BLE001 - the shard's error goes back to the replica, as an actor's would
            self._reply(c, {"error": f"{type(e).__name__}: {e}"}, status=ERROR)

    # ---- from other threads --------------------------------------------------------------------------------
    def add_door(self, accepted: Accepted) -> WireAddress:
        """(``wire_doors.open_door``.) A new token whose holders' connections go to ``accepted``."""
        token = secrets.token_bytes(16)
        with self._lock:
            self._doors[token] = accepted
        return WireAddress(self.address.host, self.address.port, token.hex())

    def remove_door(self, address: WireAddress) -> bool:
        """(``wire_doors.close_door``.) Forget a door; whether this wire, started for partitions, has none left."""
        with self._lock:
            self._doors.pop(bytes.fromhex(address.token), None)
            return self._ends_with_doors and not self._doors

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def peers(self) -> dict[str, int]:
        """The addresses that connected with a token (a replica, a partition's partner), each with its count:
        on a cluster of several hosts, which hosts this wire served."""
        with self._lock:
            return dict(self._peers)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening and end every connection; the loop ends with its last user. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        done = threading.Event()
        self._loop.call_soon(lambda: self._shut(done))
        if not self._loop.on_loop():
            done.wait(timeout)
        self._loop.leave()


