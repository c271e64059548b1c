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


class WireServer:
    """Serve ``fetch``, ``push`` and ``push_fetch`` of the shards ``lookup(key)`` finds, on ``host``.

    Parameters
    ----------
    lookup : callable
        ``key -> shard or None``: the shards of this process (on Dask, the
        worker's actors).
    host : str
        The interface to listen on: the one the worker itself listens on.
    """

    def __init__(self, lookup: Callable[[str], Any], host: str = "127.0.0.1") -> None:
        self._lookup = lookup
        self._token = secrets.token_bytes(16)
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.25)
        self.address = WireAddress(host, self._listener.getsockname()[1], self._token.hex())
        self._closed = threading.Event()
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
            conn.settimeout(None)
            tune(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name="dbkit-wire-serve", daemon=True)
            with self._lock:
                if self._closed.is_set():
                    conn.close()
                    return
                self._connections[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            key, pusher = self._hello(conn)
            if key is not None:
                self._requests(conn, key, pusher)
        except (OSError, WireError):
            pass  # the replica went away (or broke the protocol): its connection ends, the shard is untouched
        finally:
            with self._lock:
                self._connections.pop(conn, None)
            conn.close()

    def _hello(self, conn: socket.socket) -> tuple[str | None, str | None]:
        token, key_len, pusher_len = HELLO.unpack(recv_exact(conn, HELLO.size))
        key, pusher = recv_exact(conn, key_len).decode(), recv_exact(conn, pusher_len).decode() or None
        if not hmac.compare_digest(token, self._token):
            send_reply(conn, {"error": "wrong token: this wire serves only its own job's replicas"}, status=ERROR)
            return None, None
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
