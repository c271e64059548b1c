"""A partition's boundary messages as the wire's one frame (``dbkit.ps.wire_frames.FRAME``), and their reader.

A connection opens as a shard's does (``dbkit.ps.wire_frames.HELLO``: the
receiving partition's door token, the sender's partition index). Each frame is
the wire's ``FRAME`` with (kind, step, layer, partner, rows), then the JSON (a step's orders or a
partition's result, if any), then the values as raw float32 in ``rows`` rows.
A frame names its message as the mailbox does, by key: ``(step, "f", layer,
from)``, ``(step, "b", layer, from)``, ``(step, "logits", from)``,
``(step, "dlogits")``, ``(step, "go")`` (the lead partition starts a step),
and ``(step, "done", from)`` (a partner's result, or its error). Nothing received is
ever unpickled: a peer can send only numbers and JSON.

A frame leaves in one system call (``sendmsg``: header, JSON and values, no
copy), and a ``FrameReader`` takes in whatever has arrived with one ``recv``
into its buffer: a message costs two system calls, not five.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np

from ..ps.wire_frames import FRAME, MAX_META, WireError, float_count, recv_into

KINDS = {"f": 1, "b": 2, "logits": 3, "dlogits": 4, "go": 5, "done": 6}
NAMES = {code: name for name, code in KINDS.items()}
MAX_PAYLOAD = 1 << 32  # 4 GB: no boundary slice of a model that fits in memory is larger

Key = tuple


def pack_key(key: Key) -> tuple[int, int, int, int]:
    """``(kind, step, layer, partner)`` of a mailbox key (-1 where the key has no such field)."""
    step, name, *rest = key
    if name in ("f", "b"):
        layer, partner = rest
    else:
        layer, partner = -1, (rest[0] if rest else -1)
    return KINDS[name], int(step), int(layer), int(partner)


def unpack_key(kind: int, step: int, layer: int, partner: int) -> Key:
    """The mailbox key a frame names; ``WireError`` for an unknown kind."""
    name = NAMES.get(kind)
    if name is None:
        raise WireError(f"a frame of unknown kind {kind}")
    if name in ("f", "b"):
        return (step, name, layer, partner)
    return (step, name) if partner < 0 else (step, name, partner)


def send_frame(sock: socket.socket, key: Key, values: np.ndarray | None = None,
               meta: dict[str, Any] | None = None) -> int:
    """Write one frame; returns the payload's bytes."""
    body = json.dumps(meta).encode() if meta is not None else b""
    rows, payload = 0, 0
    if values is not None:
        rows = int(values.shape[0]) if values.ndim == 2 else -1  # -1: one flat vector
        payload = int(values.nbytes)
    head = FRAME.pack(*pack_key(key), rows, len(body), payload) + body
    if values is None or not payload:
        sock.sendall(head)
        return payload
    data = values.data.cast("B") if values.flags.c_contiguous else memoryview(values.tobytes())
    sent = sock.sendmsg([head, data])  # one system call, no copy: the partner wakes once for the whole frame
    if sent < len(head):  # a partial send (a full buffer, a signal): the rest as it goes
        sock.sendall(head[sent:])
        sock.sendall(data)
    elif sent < len(head) + payload:
        sock.sendall(data[sent - len(head):])
    return payload


class FrameReader:
    """The frames arriving on one connection, read in as few system calls as they arrived in.

    One ``recv`` into a buffer of ``size`` bytes usually brings a whole frame
    (header, JSON, values) and any frames behind it, which then wait here
    (``buffered``) instead of in the socket; values larger than what the
    buffer holds are read straight into their array.
    """

    def __init__(self, sock: socket.socket, size: int = 1 << 17) -> None:
        if size < FRAME.size:
            raise ValueError(f"a frame reader's buffer holds at least a header ({FRAME.size} bytes), got {size}")
        self.sock = sock
        self._buf = bytearray(size)
        self._view = memoryview(self._buf)
        self._start = self._end = 0  # the bytes received and not yet read: _buf[_start:_end]

    @property
    def buffered(self) -> int:
        """Bytes received and not read yet (a frame, or the start of one, that ``select`` would not show)."""
        return self._end - self._start

    def _fill(self, n: int) -> None:
        """At least ``n`` bytes (at most the buffer's size) buffered."""
        if self._end - self._start >= n:
            return
        if self._start + n > len(self._buf):  # no room behind: move what is left to the front
            left = self._end - self._start
            self._view[:left] = self._view[self._start:self._end]
            self._start, self._end = 0, left
        while self._end - self._start < n:
            got = self.sock.recv_into(self._view[self._end:])
            if not got:
                raise WireError(f"the peer closed the connection ({self._end - self._start} of {n} bytes received)")
            self._end += got

    def _read_into(self, out: memoryview) -> None:
        """Fill ``out``: from the buffer first, the rest straight from the socket."""
        n = min(len(out), self._end - self._start)
        out[:n] = self._view[self._start:self._start + n]
        self._start += n
        if self._start == self._end:
            self._start = self._end = 0
        if n < len(out):
            recv_into(self.sock, out[n:])

    def read(self) -> tuple[Key, np.ndarray | None, dict[str, Any] | None]:
        """``(key, values or None, meta or None)`` of the next frame; ``WireError`` on anything malformed."""
        self._fill(FRAME.size)
        kind, step, layer, partner, rows, meta_len, payload = FRAME.unpack_from(self._view, self._start)
        self._start += FRAME.size
        key = unpack_key(kind, step, layer, partner)
        if meta_len > MAX_META:
            raise WireError(f"a frame with {meta_len} bytes of JSON: not a dbkit partition")
        meta = None
        if meta_len:
            text = bytearray(meta_len)
            self._read_into(memoryview(text))
            try:
                meta = json.loads(text)
            except ValueError as e:
                raise WireError(f"a frame whose JSON does not parse: {e}") from None
            if not isinstance(meta, dict):
                raise WireError("a frame whose JSON is not an object")
        values: np.ndarray | None = None
        if payload:
            flat = np.empty(float_count(payload, MAX_PAYLOAD), dtype=np.float32)
            self._read_into(flat.data.cast("B"))
            if rows > 0:
                if flat.size % rows:
                    raise WireError(f"{flat.size} floats do not make {rows} rows")
                values = flat.reshape(rows, flat.size // rows)
            else:
                values = flat
        elif rows > 0:
            values = np.empty((rows, 0), dtype=np.float32)
        return key, values, meta
