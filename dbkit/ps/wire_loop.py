"""The process's one wire loop: one thread (``dbkit-wire``) and one ``selectors`` loop for both ends of the wire.

The shards' server (``wire_server``) and the replicas' calls to other
processes' shards (``wire_client``) are users of the same loop: each joins it
(``WireLoop.join``) and leaves it when done; the thread starts with the first
user and ends with the last. Everything that touches the selector runs on
the loop's thread: other threads hand work over with ``call_soon``, which
wakes the loop. Each user's ``tick(now)`` runs every turn, at least every
quarter second, for its timeouts. A handler's error is the handler's to
catch: one that escapes goes to ``threading.excepthook`` (printed) and the
loop goes on. No Dask import.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable

Handler = Callable[[int], None]  # run on the loop with the ready events (``selectors.EVENT_READ | EVENT_WRITE``)
TURN = 0.25  # seconds the loop waits at most before its users' ticks run again


class WireLoop:
    """The process's loop while it has users; ``join`` finds it (or starts a new one)."""

    _here: WireLoop | None = None
    # lock order: leaf (the process's loop, its users, and whether it has ended)
    _made = threading.Lock()

    @classmethod
    def join(cls) -> WireLoop:
        """This process's loop, counting one more user (a new loop if none runs); ``leave`` when done."""
        with cls._made:
            if cls._here is None or cls._here._ended:
                cls._here = WireLoop()
            return cls._here._add_user()

    def __init__(self) -> None:
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._soon: deque[Callable[[], None]] = deque()  # work handed over by other threads
        self._ticks: list[Callable[[float], None]] = []  # (the loop's thread only)
        self._users = 0  # (under ``_made``, as ``_ended``)
        self._ended = False
        self._thread = threading.Thread(target=self._run, name="dbkit-wire", daemon=True)
        self._thread.start()

    def _add_user(self) -> WireLoop:
        self._users += 1  # (under ``_made``, held by ``join``)
        return self

    # ---- from any thread -------------------------------------------------------------------------------------
    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop's thread, in the order handed over."""
        self._soon.append(fn)
        self.wake()

    def wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass  # (a wake-up is already pending, or the loop has ended)

    def leave(self) -> None:
        """One user fewer; the loop ends once none is left (after the work already handed over)."""
        with WireLoop._made:
            self._users -= 1
        self.wake()

    def on_loop(self) -> bool:
        return threading.current_thread() is self._thread

    # ---- on the loop's thread --------------------------------------------------------------------------------
    def register(self, sock: socket.socket, handler: Handler) -> None:
        """Call ``handler`` when ``sock`` is readable (and writable, once ``want_write`` asks for it)."""
        self._selector.register(sock, selectors.EVENT_READ, handler)

    def want_write(self, sock: socket.socket, write: bool) -> None:
        """Whether ``sock``'s handler is also called when the socket can take more bytes."""
        key = self._selector.get_key(sock)
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if write else 0)
        if key.events != events:
            self._selector.modify(sock, events, key.data)

    def unregister(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError, OSError):
            pass

    def add_tick(self, tick: Callable[[float], None]) -> None:
        self._ticks.append(tick)

    def remove_tick(self, tick: Callable[[float], None]) -> None:
        if tick in self._ticks:
            self._ticks.remove(tick)

    def _run(self) -> None:
        while True:
            for key, events in self._selector.select(TURN):
                if key.data is None:
                    self._drain_wakes()
                else:
                    self._guarded(key.data, events)
            while self._soon:
                self._guarded(self._soon.popleft())
            now = time.monotonic()
            for tick in list(self._ticks):
                self._guarded(tick, now)
            with WireLoop._made:
                if self._users <= 0 and not self._soon:
                    self._ended = True
                    break
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _drain_wakes(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass

    def _guarded(self, fn: Callable, *args: object) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - one user's bug must not end the loop every other user shares
            threading.excepthook(threading.ExceptHookArgs((type(e), e, e.__traceback__, self._thread)))
