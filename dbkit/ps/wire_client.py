"""One shard reached over its process's ``WireServer``: fetch and push as futures, the rest through a fallback.

A ``WireShard`` stands where an actor proxy would in ``ShardedParameters``:
``fetch``, ``push`` and ``push_fetch`` return at once with a
``concurrent.futures.Future``, and the process's one wire loop
(``wire_loop``, through ``wire_calls``) sends the requests in the order they were made and
reads the answers (the replica computes meanwhile). Any other method
(figures, learning rate, ...) goes to ``fallback``, the shard's actor.

A connection that fails fails every call after it with ``WireError``; no call
waits longer than ``timeout`` seconds on a silent peer. No Dask import.
"""

from __future__ import annotations

import socket
import weakref
from concurrent.futures import Future
from typing import Any

import numpy as np

from .owned_end import OwnedEnd
from .records import WireAddress
from .wire_calls import Call, open_calls, request
from .wire_frames import FETCH, HELLO, OK, PUSH, PUSH_FETCH, WireError, open_connection, recv_reply


class WireShard(OwnedEnd):
    """The shard ``key`` at ``address``, for the replica (or partition) named ``pusher``.

    Parameters
    ----------
    address : WireAddress
        Where the shard's process serves its wire, with its token.
    key : str
        The shard's key in that process (its actor key on Dask).
    pusher : str, optional
        Who pushes through this connection; the shard counts accepted pushes per name.
    fallback : object, optional
        What answers every other method (the shard's actor proxy).
    timeout : float
        Seconds without a byte from the peer after which a call fails.
    """

    def __init__(self, address: WireAddress, key: str, pusher: str | None = None, fallback: Any = None,
                 timeout: float = 60.0) -> None:
        self.key, self.pusher, self._fallback = key, pusher, fallback
        self._where = f"shard {key} at {address.host}:{address.port}"

        def hello(sock: socket.socket) -> dict:
            k, p = key.encode(), (pusher or "").encode()
            sock.sendall(HELLO.pack(bytes.fromhex(address.token), len(k), len(p)) + k + p)
            status, meta, _ = recv_reply(sock, 0)
            if status != OK:
                raise WireError(f"{self._where} refused the connection: {meta.get('error')}")
            return meta

        self._sock, meta = open_connection(address, self._where, hello, timeout)
        self.size = int(meta["size"])
        self._closed = False
        # The loop holds the connection's calls, not this object: a WireShard dropped without close() (a
        # partition actor deleted with its worker's state) is collected, and its finalizer ends the connection.
        self._calls = open_calls(self._sock, self._where, self.size, timeout)
        self._finalizer = weakref.finalize(self, self._calls.close)

    # ---- the calls a Downpour replica makes, answered as an actor's would be ----
    def fetch(self, into: np.ndarray | None = None) -> Future:
        """``(version, parameters)``, when it comes; with ``into`` (the shard's size, float32) the parameters
        are received straight into it."""
        return self._submit(FETCH, None, 0, 0, 0, into)

    def push(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
             first_version: int | None = None) -> Future:
        """The shard's ``PushAnswer``, when it comes. ``grad`` must not change until then."""
        return self._submit(PUSH, grad, fetched_version, first_version, examples)

    def push_fetch(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
                   first_version: int | None = None, into: np.ndarray | None = None) -> Future:
        """``(answer, version, parameters)``, when they come. ``grad`` must not change until then."""
        return self._submit(PUSH_FETCH, grad, fetched_version, first_version, examples, into)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or self.__dict__.get("_fallback") is None:
            raise AttributeError(name)
        return getattr(self._fallback, name)

    def _submit(self, op: int, grad: np.ndarray | None, version: int, first: int | None, examples: int,
                into: np.ndarray | None = None) -> Future:
        if self._closed:
            raise WireError(f"the connection to {self._where} is closed")
        if grad is not None:
            grad = np.ascontiguousarray(grad, dtype=np.float32)
            if grad.shape != (self.size,):
                raise ValueError(f"{self._where} holds {self.size} parameters; got a gradient of shape {grad.shape}")
        if into is not None and (into.shape != (self.size,) or into.dtype != np.float32
                                 or not into.flags.c_contiguous):
            raise ValueError(f"{self._where}: into must be {self.size} contiguous float32")
        first = int(version if first is None else first)
        return self._calls.submit(Call(op, request(op, grad, int(version), first, int(examples)), into))

    def close(self) -> None:
        """Finish the calls already made, then close the connection. Safe to call twice."""
        self._closed = True
        self._finalizer()

    def __repr__(self) -> str:
        return f"<WireShard {self._where}{' closed' if self._closed else ''}>"
