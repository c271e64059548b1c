"""A partition's own wire: boundary slices between partitions of one replica on different workers.

DistBelief's partitions pass messages across machines (Sec. 3). On Dask an
actor call costs about 1.5 ms before a byte moves (``docs/benchmarks.md``),
and a partitioned step makes several exchanges per layer; so each wired
partition listens on a socket of its own (``BoundaryListener``), on the
interface its worker listens on, and its partners send to it over
connections of their own (``BoundaryEnd``), one per (sender, receiver).
Dask still places the partitions and tells each where its partners listen.

A connection opens with the receiver's token (which the driver reads through
Dask and gives only to the replica's partitions) and the sender's index; a
stranger is refused before any of its bytes is read as anything but the
token, and the partition goes on. Frames are ``boundary_frames``': raw
float32, no pickle. No Dask import.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ..ps.records import WireAddress
from ..ps.wire_frames import WireError, recv_exact, tune
from .boundary_frames import HELLO, Key, recv_frame, send_frame

HELLO_TIMEOUT = 10.0  # seconds a new connection has to show the token
ACCEPTED, REFUSED = b"\x00", b"\x01"

Deliver = Callable[[int, Key, "np.ndarray | None", "dict[str, Any] | None"], None]  # sender, key, values, meta


class BoundaryListener:
    """Partition ``index``'s listener on ``host``: each frame from a partner goes to ``deliver``; a partner's
    connection that ends goes to ``lost(sender, reason)``."""

    def __init__(self, index: int, deliver: Deliver, lost: Callable[[int, str], None], host: str = "127.0.0.1",
                 hello_timeout: float = HELLO_TIMEOUT) -> None:
        self.index, self._deliver, self._lost = index, deliver, lost
        self.hello_timeout = float(hello_timeout)
        self._token = secrets.token_bytes(16)
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.25)
        self.address = WireAddress(host, self._listener.getsockname()[1], self._token.hex())
        self.refused = 0  # connections closed for want of the token
        self._closed = threading.Event()
        # lock order: a leaf (the open connections and their threads)
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._acceptor = threading.Thread(target=self._accept, name=f"dbkit-boundary-accept-{index}", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(self.hello_timeout)
            tune(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), name=f"dbkit-boundary-read-{self.index}",
                                      daemon=True)
            with self._lock:
                if self._closed.is_set():
                    conn.close()
                    return
                self._connections[conn] = thread
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        sender = None
        try:
            token, sender_index = HELLO.unpack(recv_exact(conn, HELLO.size))
            if not hmac.compare_digest(token, self._token):
                with self._lock:
                    self.refused += 1
                conn.sendall(REFUSED)
                return
            conn.sendall(ACCEPTED)
            conn.settimeout(None)  # a partner may compute for long between frames
            sender = int(sender_index)
            while True:
                key, values, meta = recv_frame(conn)
                self._deliver(sender, key, values, meta)
        except (OSError, WireError, ValueError) as e:
            if sender is not None and not self._closed.is_set():
                self._lost(sender, f"partition {sender}'s connection ended ({type(e).__name__}: {e})")
        finally:
            with self._lock:
                self._connections.pop(conn, None)
            conn.close()

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
        if threading.current_thread() is not self._acceptor:
            self._acceptor.join(timeout)
        for _, thread in items:
            if thread is not threading.current_thread():
                thread.join(timeout)


class BoundaryEnd:
    """Partition ``sender``'s connection to the partner listening at ``address``."""

    def __init__(self, address: WireAddress, sender: int, timeout: float = 60.0) -> None:
        self._where = f"a partition at {address.host}:{address.port}"
        try:
            self._sock = socket.create_connection((address.host, address.port), timeout=timeout)
        except OSError as e:
            raise WireError(f"cannot reach {self._where}: {e}") from e
        try:
            tune(self._sock)
            self._sock.sendall(HELLO.pack(bytes.fromhex(address.token), int(sender)))
            if recv_exact(self._sock, 1) != ACCEPTED:
                raise WireError(f"{self._where} refused the connection (wrong token)")
        except (OSError, WireError) as e:
            self._sock.close()
            raise e if isinstance(e, WireError) else WireError(f"{self._where}: {e}") from e
        self._sock.settimeout(timeout)  # a send blocked this long on a partner that reads nothing fails
        # lock order: a leaf (one frame at a time on the socket)
        self._lock = threading.Lock()

    def send(self, key: Key, values: np.ndarray | None = None, meta: dict[str, Any] | None = None) -> None:
        try:
            with self._lock:
                send_frame(self._sock, key, values, meta)
        except OSError as e:
            raise WireError(f"sending {key[1:]} to {self._where}: {e}") from e

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
