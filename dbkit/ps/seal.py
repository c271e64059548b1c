"""A SHA-256 over every byte of a checkpoint file, kept inside the file itself.

A checksum over the arrays alone misses a flipped bit in a zip header (the
compression method, a flag, a length), which then escapes as another error or
reads as something else; a checksum over parsed JSON misses a flip that still
parses to the same values (``1e5`` and ``1E5``) and is no help against one that
parses to others (an ``lr`` of 0.05 read as 1.05). So the digest covers the
file's bytes exactly as written, with 64 ``0`` characters where the digest
goes, and the digest then takes their place:

- an ``.npz`` (a zip archive) keeps it as the archive's comment, the file's
  last 64 bytes, so it stays an archive any zip reader opens;
- a JSON file keeps it as the value of a last key, ``"sha256"``, so it stays
  JSON any reader parses.

``unseal_*`` refuse a file whose bytes do not match, before anything is
parsed. No Dask import.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from typing import Any

from .checkpoint_error import CheckpointError

PLACEHOLDER = b"0" * 64
_JSON_KEY = b'"sha256": "'
_HEX = set(b"0123456789abcdef")


def _sealed(raw: bytes, at: int) -> bytes:
    digest = hashlib.sha256(raw).hexdigest().encode()
    return raw[:at] + digest + raw[at + 64:]


def _check(raw: bytes, at: int, name: str) -> None:
    if at < 0 or raw[at:at + 64] == PLACEHOLDER or not set(raw[at:at + 64]) <= _HEX or len(raw) < at + 64:
        raise CheckpointError(f"{name} carries no checksum: corrupt, or not written by this dbkit")
    expected = raw[at:at + 64]
    if hashlib.sha256(raw[:at] + PLACEHOLDER + raw[at + 64:]).hexdigest().encode() != expected:
        raise CheckpointError(f"{name} is corrupt: its bytes do not match their checksum")


def seal_npz(arrays: dict[str, Any]) -> bytes:
    """The bytes of ``np.savez(**arrays)``, sealed (the digest as the archive's comment)."""
    import numpy as np

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with zipfile.ZipFile(buffer, "a") as z:
        z.comment = PLACEHOLDER
    raw = buffer.getvalue()
    return _sealed(raw, len(raw) - 64)


def unseal_npz(raw: bytes, name: str) -> io.BytesIO:
    """``raw`` checked whole; a file object over it for ``np.load``."""
    _check(raw, len(raw) - 64 if len(raw) >= 64 else -1, name)
    return io.BytesIO(raw)


def seal_json(doc: dict[str, Any]) -> bytes:
    """``doc`` as indented JSON with a last key ``sha256`` over the file's bytes."""
    if "sha256" in doc:
        raise ValueError("a sealed document keeps its own sha256 key")
    raw = json.dumps({**doc, "sha256": PLACEHOLDER.decode()}, indent=1).encode()
    return _sealed(raw, raw.rindex(_JSON_KEY) + len(_JSON_KEY))


def unseal_json(raw: bytes, name: str) -> dict[str, Any]:
    """The document in ``raw``, checked whole (its ``sha256`` key removed); ``CheckpointError`` otherwise."""
    at = raw.rfind(_JSON_KEY)
    _check(raw, at + len(_JSON_KEY) if at >= 0 else -1, name)
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:  # a valid digest over invalid JSON: not ours
        raise CheckpointError(f"{name} is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise CheckpointError(f"{name} is not a JSON object")
    doc.pop("sha256", None)
    return doc
