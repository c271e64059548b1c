"""A partition's end of the wire: boundary slices to a partner of the same replica on another worker.

DistBelief's partitions pass messages across machines (Sec. 3). On Dask an
actor call costs about 1.5 ms before a byte moves (``docs/benchmarks.md``),
and a partitioned step makes several exchanges per layer; so a wired
partition opens a door on its process's wire (``dbkit.ps.wire_doors``), on
the interface its worker listens on, and its partners send to it over
connections of their own (``BoundaryEnd``), one per (sender, receiver).
Dask still places the partitions and tells each where its partners listen;
the partition's mailbox reads the connections (``mailbox``).

A connection opens as a shard's does (``wire_frames.HELLO``), with the
receiver's door token (which the driver reads through Dask and gives only to
the replica's partitions) and the sender's index; the wire's loop refuses a
stranger before any of its bytes is read as anything but the token, and
greets any number at once. Frames are ``boundary_frames``': raw float32, no
pickle. No Dask import.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import numpy as np

from ..ps.records import WireAddress
from ..ps.wire_frames import HELLO, OK, WireError, open_connection, recv_reply
from .boundary_frames import Key, send_frame


class BoundaryEnd:
    """Partition ``sender``'s connection to the partner listening at ``address``."""

    def __init__(self, address: WireAddress, sender: int, timeout: float = 60.0) -> None:
        self._where = f"a partition at {address.host}:{address.port}"

        def hello(sock: socket.socket) -> None:
            name = str(int(sender)).encode()
            sock.sendall(HELLO.pack(bytes.fromhex(address.token), 0, len(name)) + name)
            status, meta, _ = recv_reply(sock, 0)
            if status != OK:
                raise WireError(f"{self._where} refused the connection: {meta.get('error', meta)}")

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
