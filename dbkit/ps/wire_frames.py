"""The one frame the wire carries: a fixed header, a little JSON, then raw float32 (no pickle).

Every frame on the wire, a shard's and a partition's alike, is ``FRAME``
(a code, four integers, JSON bytes, payload bytes), then the JSON, then the
values. A shard's *request* is (operation, fetched version, first version,
examples, 0) and the gradient slice, if any, with no JSON; its *reply* is
(status, 0, 0, 0, 0), the JSON (a push's answer, the version fetched, or an
error) and the parameters, if any; a partition's frame is (kind, step, layer,
partner, rows) (``dbkit.partition.boundary_frames``). A connection opens with
``HELLO`` (a token, then the shard's key or nothing, and the sender's name).
Nothing received is ever unpickled: a peer can send only numbers and JSON.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

FETCH, PUSH, PUSH_FETCH = 1, 2, 3
OPERATIONS = {"fetch": FETCH, "push": PUSH, "push_fetch": PUSH_FETCH}
#: code (operation, status or kind), four integers, JSON bytes, payload bytes
FRAME = struct.Struct("<BqqqqIQ")
HELLO = struct.Struct("<16sHH")  # token, key bytes, pusher bytes
OK, ERROR = 0, 1
MAX_META = 1 << 20  # a frame's JSON is a few hundred bytes; anything larger is not dbkit speaking


class WireError(ConnectionError):
    """The connection to a shard failed, or its peer broke the protocol."""


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from ``sock``; ``WireError`` if the peer closes first."""
    buf = bytearray(n)
    recv_into(sock, memoryview(buf))
    return bytes(buf)


def recv_into(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock``; ``WireError`` if the peer closes first."""
    got, n = 0, len(view)
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise WireError(f"the peer closed the connection ({got} of {n} bytes received)")
        got += k


def recv_some(sock: socket.socket, view: memoryview) -> int | None:
    """The bytes a non-blocking ``sock`` put into ``view`` now, or ``None`` if none has arrived; ``WireError``
    if the peer closed."""
    try:
        k = sock.recv_into(view)
    except (BlockingIOError, InterruptedError):
        return None
    if k == 0:
        raise WireError("the peer closed the connection")
    return k


def float_count(nbytes: int, limit: int) -> int:
    """How many float32 ``nbytes`` hold; ``WireError`` above ``limit`` bytes or if they are not whole floats."""
    if nbytes < 0 or nbytes > limit or nbytes % 4:
        raise WireError(f"a frame of {nbytes} bytes where at most {limit} bytes of float32 were expected")
    return nbytes // 4


def recv_floats(sock: socket.socket, nbytes: int, limit: int, into: np.ndarray | None = None) -> np.ndarray:
    """``nbytes`` of float32 from ``sock``, refused above ``limit`` bytes or if not whole floats; read into
    ``into`` when it is large enough (a buffer reused across messages)."""
    n = float_count(nbytes, limit)
    out = into[:n] if into is not None and len(into) >= n else np.empty(n, dtype=np.float32)
    recv_into(sock, out.data.cast("B"))
    return out


def recv_reply(sock: socket.socket, limit: int, into: np.ndarray | None = None
               ) -> tuple[int, dict[str, Any], np.ndarray | None]:
    """``(status, meta, values or None)`` of one reply."""
    status, *_, meta_len, payload = FRAME.unpack(recv_exact(sock, FRAME.size))
    if meta_len > MAX_META:
        raise WireError(f"a reply with {meta_len} bytes of JSON: not a dbkit shard")
    meta = json.loads(recv_exact(sock, meta_len)) if meta_len else {}
    values = recv_floats(sock, payload, limit, into) if payload else None
    return status, meta, values


def open_connection(address: Any, where: str, greet: Callable[[socket.socket], Any], timeout: float = 60.0
                    ) -> tuple[socket.socket, Any]:
    """A tuned connection to ``address`` (host, port) and what ``greet(sock)`` answered (the hello and its
    reply); ``WireError`` naming ``where`` if it cannot be reached or the greeting fails (the socket closed)."""
    try:
        sock = socket.create_connection((address.host, address.port), timeout=timeout)
    except OSError as e:
        raise WireError(f"cannot reach {where}: {e}") from e
    try:
        tune(sock)
        return sock, greet(sock)
    except (OSError, WireError) as e:
        sock.close()
        raise e if isinstance(e, WireError) else WireError(f"{where}: {e}") from e


def tune(sock: socket.socket) -> None:
    """No Nagle delay for the small headers; socket buffers sized for megabyte frames."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
        except OSError:  # pragma: no cover - a kernel limit: the default buffers still work
            pass
