"""The frames a partition's boundary wire carries: a fixed header, a little JSON, then raw float32 (no pickle).

A connection opens with ``HELLO``: the receiving partition's token and the
sender's partition index. Each frame is ``FRAME`` (kind, step, layer, partner,
rows, JSON bytes, payload bytes), then the JSON (a step's orders or a
partition's result, if any), then the values as raw float32 in ``rows`` rows.
A frame names its message as the mailbox does, by key: ``(step, "f", layer,
from)``, ``(step, "b", layer, from)``, ``(step, "logits", from)``,
``(step, "dlogits")``, ``(step, "go")`` (the lead partition starts a step),
and ``(step, "done", from)`` (a partner's result, or its error). Nothing received is
ever unpickled: a peer can send only numbers and JSON.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

import numpy as np

from ..ps.wire_frames import WireError, recv_exact, recv_floats

KINDS = {"f": 1, "b": 2, "logits": 3, "dlogits": 4, "go": 5, "done": 6}
NAMES = {code: name for name, code in KINDS.items()}
FRAME = struct.Struct("<BqiiiIQ")  # kind, step, layer, partner, rows, JSON bytes, payload bytes
HELLO = struct.Struct("<16si")  # the receiver's token, the sender's partition index
MAX_META = 1 << 20  # a step's orders or result are a few hundred bytes of JSON
SMALL = 1 << 16  # a payload up to this many bytes goes in one send with its header
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
    elif payload <= SMALL:  # one segment: the partner wakes once, not once for the header and once more
        sock.sendall(head + values.tobytes())
    else:
        sock.sendall(head)
        sock.sendall(values.data.cast("B") if values.flags.c_contiguous else values.tobytes())
    return payload


def recv_frame(sock: socket.socket) -> tuple[Key, np.ndarray | None, dict[str, Any] | None]:
    """``(key, values or None, meta or None)`` of the next frame; ``WireError`` on anything malformed."""
    kind, step, layer, partner, rows, meta_len, payload = FRAME.unpack(recv_exact(sock, FRAME.size))
    key = unpack_key(kind, step, layer, partner)
    if meta_len > MAX_META:
        raise WireError(f"a frame with {meta_len} bytes of JSON: not a dbkit partition")
    try:
        meta = json.loads(recv_exact(sock, meta_len)) if meta_len else None
    except ValueError as e:
        raise WireError(f"a frame whose JSON does not parse: {e}") from None
    if meta is not None and not isinstance(meta, dict):
        raise WireError("a frame whose JSON is not an object")
    values = None
    if payload:
        flat = recv_floats(sock, payload, MAX_PAYLOAD)
        if rows > 0:
            if flat.size % rows:
                raise WireError(f"{flat.size} floats do not make {rows} rows")
            values = flat.reshape(rows, flat.size // rows)
        else:
            values = flat
    elif rows > 0:
        values = np.empty((rows, 0), dtype=np.float32)
    return key, values, meta
