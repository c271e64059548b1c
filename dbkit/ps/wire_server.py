"""The shards of one process served over plain sockets, for the bulk arrays of fetch and push.

DistBelief's replicas talk to the parameter server shards directly, many at
once (paper Sec. 4.1). On Dask each call to a shard actor costs about 0.5 ms
of CPU on each side before any byte moves, and more per megabyte than the
socket does (``docs/benchmarks.md``, issue #12): with both cores computing,
that CPU is taken from a replica. A ``WireServer`` lets a replica reach the
shards of another process over its own TCP connection, one per (replica,
shard), at the raw socket's cost. Dask still places the shards and finds
them; everything but fetch and push still goes to the actor.

A connection must open with the server's token (``WireAddress.token``, which
the driver reads through Dask and gives only to its replicas) and names its
shard by key; the server looks the key up on every request, so a shard
released from the process is gone for its connections too. Nothing received
is unpickled. No Dask import.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .records import WireAddress
from .wire_frames import (
    ERROR,
    FETCH,
    HELLO,
    PUSH,
    PUSH_FETCH,
    REQUEST,
    WireError,
    recv_exact,
    recv_floats,
    send_reply,
    tune,
)

HELLO_TIMEOUT = 10.0  # seconds a new connection has to show the token
MAX_STRANGERS = 32  # connections at once that have not shown it yet


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
        Connections at once that have not yet shown the token; one more is
        closed at once, so idle strangers cannot hold the worker's threads.
    """

    def __init__(self, lookup: Callable[[str], Any], host: str = "127.0.0.1", hello_timeout: float = HELLO_TIMEOUT,
                 max_strangers: int = MAX_STRANGERS) -> None:
        self._lookup = lookup
        self.hello_timeout, self.max_strangers = float(hello_timeout), int(max_strangers)
        self._strangers = 0  # connections that have not yet shown the token (guarded by _lock)
        self.refused = 0  # connections closed for want of a token: wrong, late, or one stranger too many
        self._token = secrets.token_bytes(16)
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.25)
        self.address = WireAddress(host, self._listener.getsockname()[1], self._token.hex())
        self._closed = threading.Event()
        # lock order: leaf (the open connections and the count of strangers)
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self.requests = 0  # fetches and pushes served (for tests and benchmarks)
        self._acceptor = threading.Thread(target=self._accept, name="dbkit-wire-accept", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(self.hello_timeout)  # until the token is shown
            tune(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name="dbkit-wire-serve", daemon=True)
            with self._lock:
                if self._closed.is_set():
                    conn.close()
                    return
                if self._strangers >= self.max_strangers:
                    self.refused += 1
                    conn.close()
                    continue
                self._strangers += 1
                self._connections[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        stranger = True
        try:
            key, pusher = self._hello(conn)
            with self._lock:
                self._strangers -= 1
            stranger = False
            if key is not None:
                conn.settimeout(None)  # a replica may compute for long between requests
                self._requests(conn, key, pusher)
        except (OSError, WireError, ValueError):  # ValueError: a key that is not UTF-8
            pass  # the replica went away (or broke the protocol): its connection ends, the shard is untouched
        finally:
            with self._lock:
                self._connections.pop(conn, None)
                if stranger:
                    self._strangers -= 1
                    self.refused += 1
            conn.close()

    def _hello(self, conn: socket.socket) -> tuple[str | None, str | None]:
        """The token first, then (only for the token's holder) anything decoded; a stranger is answered and
        dropped before any of its bytes are read as text."""
        token, key_len, pusher_len = HELLO.unpack(recv_exact(conn, HELLO.size))
        if not hmac.compare_digest(token, self._token):
            send_reply(conn, {"error": "wrong token: this wire serves only its own job's replicas"}, status=ERROR)
            raise WireError("a connection without the token")
        key, pusher = recv_exact(conn, key_len).decode(), recv_exact(conn, pusher_len).decode() or None
        shard = self._lookup(key)
        if shard is None:
            send_reply(conn, {"error": f"no shard {key} in this process"}, status=ERROR)
            return None, None
        send_reply(conn, {"size": int(shard.size)})
        return key, pusher

    def _requests(self, conn: socket.socket, key: str, pusher: str | None) -> None:
        landing: np.ndarray | None = None
        while True:
            op, version, first, examples, nbytes = REQUEST.unpack(recv_exact(conn, REQUEST.size))
            self.requests += 1  # one serving thread per connection; a lost count under a race is harmless
            shard = self._lookup(key)
            if shard is None:
                send_reply(conn, {"error": f"shard {key} is gone from this process"}, status=ERROR)
                return
            if op not in (FETCH, PUSH, PUSH_FETCH):
                send_reply(conn, {"error": f"unknown operation {op}"}, status=ERROR)
                return
            if op == FETCH:
                version, values = shard.fetch()
                send_reply(conn, {"version": int(version)}, values)
                continue
            if landing is None or len(landing) != shard.size:
                landing = np.empty(shard.size, dtype=np.float32)
            grad = recv_floats(conn, nbytes, 4 * shard.size, landing)
            try:
                if op == PUSH:
                    answer = shard.push(grad, version, pusher, examples, first)
                    send_reply(conn, {"answer": dataclasses.asdict(answer)})
                else:
                    answer, version, values = shard.push_fetch(grad, version, pusher, examples, first)
                    send_reply(conn, {"answer": dataclasses.asdict(answer), "version": int(version)}, values)
            except (OSError, WireError):
                raise
            except Exception as e:  # noqa: BLE001 - the shard's error goes back to the replica, as an actor's would
                send_reply(conn, {"error": f"{type(e).__name__}: {e}"}, status=ERROR)

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._connections)

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening, end every connection and join every thread. Safe to call twice."""
        self._closed.set()
        self._listener.close()
        with self._lock:
            items = list(self._connections.items())
        for conn, _ in items:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._acceptor.join(timeout)
        for _, thread in items:
            thread.join(timeout)
