"""A replica's end of the wire: one shard reached over its process's ``WireServer``, and the calls of every
such end of a process, carried by its one wire loop (``wire_loop``) beside the server.

A ``WireShard`` stands where an actor proxy would in ``ShardedParameters``:
``fetch``, ``push`` and ``push_fetch`` return at once with a
``concurrent.futures.Future`` and are answered in the order they were made
(DistBelief Sec. 4.1: a replica fetches and pushes while it computes). Any
other method (figures, learning rate, ...) goes to ``fallback``, the shard's
actor.

Each connection (``_Calls``) keeps the calls not yet sent and those sent and
not yet answered; the loop writes requests as the socket takes them and reads
each reply into the array its call named, then settles that call's future.
The replica threads only queue calls and wake the loop. A peer silent for
``timeout`` seconds with calls outstanding fails them all, as does a
connection that breaks; every later call then fails at once with
``WireError``. No Dask import.
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .owned_end import OwnedEnd
from .records import PushAnswer, WireAddress
from .wire_frames import (
    FETCH,
    FRAME,
    HELLO,
    MAX_META,
    OK,
    PUSH,
    PUSH_FETCH,
    WireError,
    float_count,
    open_connection,
    recv_reply,
    recv_some,
)
from .wire_loop import WireLoop


@dataclass
class Call:
    """One call on the wire: its request's bytes, where its parameters go, and its future."""

    op: int
    request: list[memoryview]
    into: np.ndarray | None
    future: Future = field(default_factory=Future)


class _Calls:
    """One connection's calls: queued (``waiting``), sent and not answered (``sent``), and the reply being read."""

    def __init__(self, sock: socket.socket, where: str, size: int, timeout: float) -> None:
        self.sock, self.where, self.size, self.timeout = sock, where, size, timeout
        self.waiting: deque[Call] = deque()  # (appended by callers, taken by the loop)
        self.sent: deque[Call] = deque()
        self.out: deque[memoryview] = deque()
        self.closing = False
        self.closed = threading.Event()
        self.broken: WireError | None = None
        self.heard = time.monotonic()
        self.loop = WireLoop.join()  # the process's loop carries it, from ``start`` to ``_end``
        self._header()

    def _header(self) -> None:
        self.view, self.got, self.stage = memoryview(bytearray(FRAME.size)), 0, "header"

    def take(self) -> None:
        """Move the calls queued since into the bytes to send."""
        while self.waiting:
            call = self.waiting.popleft()
            self.sent.append(call)
            self.out.extend(call.request)

    def received(self) -> None:
        """The part of a reply under way is full: read the next part, or settle the oldest call."""
        if self.stage == "header":
            self.status, *_, meta_len, self.payload = FRAME.unpack(self.view)
            if meta_len > MAX_META:
                raise WireError(f"a reply with {meta_len} bytes of JSON: not a dbkit shard")
            self.view, self.got, self.stage = memoryview(bytearray(meta_len)), 0, "meta"
            if meta_len:
                return
        if self.stage == "meta":
            self.meta = json.loads(bytes(self.view)) if len(self.view) else {}
            n = float_count(self.payload, 4 * self.size)
            into = self.sent[0].into if self.sent else None
            self.values = into[:n] if into is not None and len(into) >= n else np.empty(n, dtype=np.float32)
            self.view, self.got, self.stage = self.values.data.cast("B"), 0, "values"
            if n:
                return
        self._settle(self.sent.popleft())
        self._header()

    def _settle(self, call: Call) -> None:
        meta, values = self.meta, self.values
        if self.status != OK:
            call.future.set_exception(RuntimeError(f"{self.where}: {meta.get('error')}"))
        elif call.op == FETCH:
            call.future.set_result((meta["version"], values))
        elif call.op == PUSH:
            call.future.set_result(PushAnswer(**meta["answer"]))
        else:
            call.future.set_result((PushAnswer(**meta["answer"]), meta["version"], values))

    def fail(self, error: WireError) -> None:
        self.broken = error
        for call in (*self.sent, *self.waiting):
            if not call.future.done():
                call.future.set_exception(error)
        self.sent.clear()
        self.waiting.clear()

    # ---- from the caller's thread --------------------------------------------------------------------------
    def start(self) -> None:
        self.loop.call_soon(self._register)

    def submit(self, call: Call) -> Future:
        if self.broken is not None:
            call.future.set_exception(self.broken)
            return call.future
        self.waiting.append(call)
        self.loop.call_soon(self._flush)
        return call.future

    def close(self, timeout: float = 5.0) -> None:
        """Finish the calls made, then close; a peer silent for ``timeout`` s after that fails them."""
        self.closing = True
        self.loop.call_soon(self._flush)
        if not self.loop.on_loop() and not self.closed.wait(timeout):
            self.fail(WireError(f"{self.where}: closed with calls unanswered after {timeout:g} s"))
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    # ---- on the process's wire loop ------------------------------------------------------------------------
    def _register(self) -> None:
        self.loop.register(self.sock, self._ready)
        self.loop.add_tick(self._tick)

    def _ready(self, events: int) -> None:
        try:
            if events & selectors.EVENT_READ:
                self._read()
            if events & selectors.EVENT_WRITE:
                self._write()
        except (OSError, WireError, ValueError) as e:
            self._end(WireError(f"lost the connection to {self.where}: {e}"))

    def _flush(self) -> None:
        if self.closed.is_set():
            return
        self.take()
        try:
            self._write()
        except OSError as e:
            self._end(WireError(f"lost the connection to {self.where}: {e}"))

    def _tick(self, now: float) -> None:
        if self.closing and not self.sent and not self.waiting and not self.out:
            self._end(None)
        elif self.sent and now - self.heard > self.timeout:
            self._end(WireError(f"{self.where} was silent for {self.timeout:g} s"))

    def _read(self) -> None:
        while True:
            if self.got < len(self.view):
                k = recv_some(self.sock, self.view[self.got:])
                if k is None:
                    return
                self.got += k
                self.heard = time.monotonic()
                if self.got < len(self.view):
                    continue
            if not self.sent:
                raise WireError("a reply to no call")
            self.received()

    def _write(self) -> None:
        out = self.out
        while out:
            try:
                k = self.sock.send(out[0])
            except (BlockingIOError, InterruptedError):
                break
            out[0] = out[0][k:]
            if not len(out[0]):
                out.popleft()
        if self.sent and not out:
            self.heard = max(self.heard, time.monotonic())  # (a peer's silence counts from the last request)
        self.loop.want_write(self.sock, bool(out))

    def _end(self, error: WireError | None) -> None:
        if self.closed.is_set():
            return
        if error is not None:
            self.fail(error)
        self.loop.unregister(self.sock)
        self.loop.remove_tick(self._tick)
        self.sock.close()
        self.closed.set()
        self.loop.leave()


def open_calls(sock: socket.socket, where: str, size: int, timeout: float) -> _Calls:
    """Carry the calls of ``sock`` (greeted already) from now on, on the process's wire loop."""
    sock.setblocking(False)
    calls = _Calls(sock, where, size, timeout)
    calls.start()
    return calls


def request(op: int, grad: np.ndarray | None, version: int, first: int, examples: int) -> list[memoryview]:
    """A request's bytes: its header, then the gradient's raw float32, if any."""
    head = memoryview(FRAME.pack(op, version, first, examples, 0, 0, 0 if grad is None else grad.nbytes))
    return [head] if grad is None else [head, grad.data.cast("B")]

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
