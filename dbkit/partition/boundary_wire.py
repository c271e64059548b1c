"""A partition's own wire: boundary slices between partitions of one replica on different workers.

DistBelief's partitions pass messages across machines (Sec. 3). On Dask an
actor call costs about 1.5 ms before a byte moves (``docs/benchmarks.md``),
and a partitioned step makes several exchanges per layer; so each wired
partition listens on a socket of its own (``BoundaryListener``), on the
interface its worker listens on, and its partners send to it over
connections of their own (``BoundaryEnd``), one per (sender, receiver).
Dask still places the partitions and tells each where its partners listen;
the partition's mailbox reads the connections (``mailbox``).

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
from ..ps.wire_frames import WireError, open_connection, recv_exact, tune
from .boundary_frames import HELLO, Key, send_frame

HELLO_TIMEOUT = 10.0  # seconds a new connection has to show the token
ACCEPTED, REFUSED = b"\x00", b"\x01"

class BoundaryListener:
    """Partition ``index``'s listener on ``host``: a partner's connection that shows the token goes to
    ``accepted(sender, connection)`` (its mailbox, which reads it from then on); any other is refused."""

    def __init__(self, index: int, accepted: Callable[[int, socket.socket], None], host: str = "127.0.0.1",
                 hello_timeout: float = HELLO_TIMEOUT) -> None:
        self.index, self._accepted = index, accepted
        self.hello_timeout = float(hello_timeout)
        self._token = secrets.token_bytes(16)
        self._listener = socket.create_server((host, 0))
        self._listener.settimeout(0.25)
        self.address = WireAddress(host, self._listener.getsockname()[1], self._token.hex())
        self.refused = 0  # connections closed for want of the token (read by tests)
        self._closed = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name=f"dbkit-boundary-accept-{index}", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        """One connection at a time: a stranger has ``hello_timeout`` seconds to show the token (partners
        connect once, when the replica is placed)."""
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                conn.settimeout(self.hello_timeout)
                tune(conn)
                token, sender = HELLO.unpack(recv_exact(conn, HELLO.size))
                if not hmac.compare_digest(token, self._token):
                    self.refused += 1
                    conn.sendall(REFUSED)
                    conn.close()
                    continue
                conn.sendall(ACCEPTED)
            except (OSError, WireError):
                self.refused += 1
                conn.close()
                continue
            self._accepted(int(sender), conn)

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening and join the accepting thread. Safe to call twice."""
        self._closed.set()
        self._listener.close()
        if threading.current_thread() is not self._acceptor:
            self._acceptor.join(timeout)


class BoundaryEnd:
    """Partition ``sender``'s connection to the partner listening at ``address``."""

    def __init__(self, address: WireAddress, sender: int, timeout: float = 60.0) -> None:
        self._where = f"a partition at {address.host}:{address.port}"

        def hello(sock: socket.socket) -> None:
            sock.sendall(HELLO.pack(bytes.fromhex(address.token), int(sender)))
            if recv_exact(sock, 1) != ACCEPTED:
                raise WireError(f"{self._where} refused the connection (wrong token)")

        self._sock, _ = open_connection(address, self._where, hello, timeout)
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
