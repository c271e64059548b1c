"""One thread per process carries every ``WireShard`` 's calls: a ``selectors`` loop over their sockets.

A replica's calls to a shard across the wire return futures at once and are
answered in the order they were made (DistBelief Sec. 4.1: a replica fetches and
pushes while it computes). Each connection (``_Calls``) keeps the calls not yet
sent and those sent and not yet answered; the loop writes requests as the socket
takes them and reads each reply into the array its call named, then settles that
call's future. The replica threads only queue calls and wake the loop. A peer
silent for ``timeout`` seconds with calls outstanding fails them all, as does a
connection that breaks; every later call then fails at once. No Dask import.
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from .records import PushAnswer
from .wire_frames import FETCH, MAX_META, OK, PUSH, REPLY, REQUEST, WireError, float_count


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
        self.loop: CallLoop | None = None  # the loop that carries it
        self._header()

    def _header(self) -> None:
        self.view, self.got, self.stage = memoryview(bytearray(REPLY.size)), 0, "header"

    def take(self) -> None:
        """Move the calls queued since into the bytes to send."""
        while self.waiting:
            call = self.waiting.popleft()
            self.sent.append(call)
            self.out.extend(call.request)

    def received(self) -> None:
        """The part of a reply under way is full: read the next part, or settle the oldest call."""
        if self.stage == "header":
            self.status, meta_len, self.payload = REPLY.unpack(self.view)
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


class CallLoop:
    """The process's loop (thread ``dbkit-wire-calls``), while it carries a connection; see ``open``."""

    _here: CallLoop | None = None
    # lock order: leaf (the one loop of the process, and whether it has ended)
    _made = threading.Lock()

    @classmethod
    def open(cls, sock: socket.socket, where: str, size: int, timeout: float) -> _Calls:
        """Carry the calls of ``sock`` (greeted already) from now on, on the process's loop (started if
        none runs: it ends once it carries no connection)."""
        sock.setblocking(False)
        calls = _Calls(sock, where, size, timeout)
        with cls._made:
            if cls._here is None or cls._here._ended:
                cls._here = CallLoop()
            calls.loop = cls._here
            cls._here._joining.append(calls)
        calls.loop.wake()
        return calls

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._joining: deque[_Calls] = deque()  # new connections and those with calls queued
        self._ended = False  # (under ``_made``: no connection left, the thread has ended or is ending)
        self._thread = threading.Thread(target=self._run, name="dbkit-wire-calls", daemon=True)
        self._thread.start()

    def submit(self, calls: _Calls, call: Call) -> Future:
        if calls.broken is not None:
            call.future.set_exception(calls.broken)
            return call.future
        calls.waiting.append(call)
        self._joining.append(calls)
        self.wake()
        return call.future

    def close(self, calls: _Calls, timeout: float = 5.0) -> None:
        """Finish the calls made, then close; a peer silent for ``timeout`` s after that fails them."""
        calls.closing = True
        self._joining.append(calls)
        self.wake()
        if threading.current_thread() is not self._thread and not calls.closed.wait(timeout):
            calls.fail(WireError(f"{calls.where}: closed with calls unanswered after {timeout:g} s"))
            try:
                calls.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # (a wake-up is already pending)

    # ---- the loop's thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        live: set[_Calls] = set()
        while True:
            for key, events in self._selector.select(0.5):
                calls = key.data
                if calls is None:
                    try:
                        while self._wake_r.recv(4096):
                            pass
                    except (BlockingIOError, OSError):
                        pass
                    continue
                try:
                    if events & selectors.EVENT_READ:
                        self._read(calls)
                    if events & selectors.EVENT_WRITE:
                        self._write(calls)
                except (OSError, WireError, ValueError) as e:
                    self._end(calls, live, WireError(f"lost the connection to {calls.where}: {e}"))
            while self._joining:
                calls = self._joining.popleft()
                if calls.closed.is_set():
                    continue
                if calls not in live:
                    live.add(calls)
                    self._selector.register(calls.sock, selectors.EVENT_READ, calls)
                calls.take()
                try:
                    self._write(calls)
                except OSError as e:
                    self._end(calls, live, WireError(f"lost the connection to {calls.where}: {e}"))
            now = time.monotonic()
            for calls in list(live):
                if calls.closing and not calls.sent and not calls.waiting and not calls.out:
                    self._end(calls, live, None)
                elif calls.sent and now - calls.heard > calls.timeout:
                    self._end(calls, live, WireError(f"{calls.where} was silent for {calls.timeout:g} s"))
            if not live:
                with CallLoop._made:
                    if not self._joining:
                        self._ended = True
                        break
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _read(self, calls: _Calls) -> None:
        while True:
            if calls.got < len(calls.view):
                try:
                    k = calls.sock.recv_into(calls.view[calls.got:])
                except (BlockingIOError, InterruptedError):
                    return
                if k == 0:
                    raise WireError("the peer closed the connection")
                calls.got += k
                calls.heard = time.monotonic()
                if calls.got < len(calls.view):
                    continue
            if not calls.sent:
                raise WireError("a reply to no call")
            calls.received()

    def _write(self, calls: _Calls) -> None:
        out = calls.out
        while out:
            try:
                k = calls.sock.send(out[0])
            except (BlockingIOError, InterruptedError):
                break
            out[0] = out[0][k:]
            if not len(out[0]):
                out.popleft()
        if calls.sent and not out:
            calls.heard = max(calls.heard, time.monotonic())  # (a peer's silence counts from the last request)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if out else 0)
        if self._selector.get_key(calls.sock).events != events:
            self._selector.modify(calls.sock, events, calls)

    def _end(self, calls: _Calls, live: set[_Calls], error: WireError | None) -> None:
        if error is not None:
            calls.fail(error)
        live.discard(calls)
        try:
            self._selector.unregister(calls.sock)
        except (KeyError, ValueError):
            pass
        calls.sock.close()
        calls.closed.set()


def request(op: int, grad: np.ndarray | None, version: int, first: int, examples: int) -> list[memoryview]:
    """A request's bytes: its header, then the gradient's raw float32, if any."""
    head = memoryview(REQUEST.pack(op, version, first, examples, 0 if grad is None else grad.nbytes))
    return [head] if grad is None else [head, grad.data.cast("B")]
