"""Workers in this process: each an address, the actors placed on it, and one thread for their calls.

As on a Dask worker, every method call to an actor on one worker runs on that
worker's one actor thread, in the order the calls arrive, and returns a future
at once; a task placed on a worker runs on a thread of its own for as long as
it likes (a seceded Dask task). A lost worker's actors are gone: calls to them
raise ``RuntimeError``, as a Dask actor proxy's do.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

LOST = "Worker holding Actor was lost"  # Dask's words, which the drivers already expect


class Worker:
    """One in-process worker. ``_lock`` guards its actors and whether it is alive."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._actors: dict[str, Any] = {}
        self._alive = True
        self._lock = threading.Lock()
        self._calls = ThreadPoolExecutor(1, thread_name_prefix=f"dbkit-{address}-actors")

    @property
    def alive(self) -> bool:
        return self._alive

    def add(self, key: str, actor: Any) -> None:
        with self._lock:
            if not self._alive:
                raise RuntimeError(f"{LOST}: {self.address}")
            if key in self._actors:
                raise KeyError(f"an actor {key!r} is already on {self.address}")
            self._actors[key] = actor

    def get(self, key: str) -> Any | None:
        with self._lock:
            return self._actors.get(key)

    def keys(self) -> list[str]:
        """The keys of the actors on this worker."""
        with self._lock:
            return sorted(self._actors)

    def remove(self, key: str) -> None:
        with self._lock:
            self._actors.pop(key, None)

    def call(self, key: str, method: str, args: tuple, kwargs: dict) -> Future:
        """``actor.method(*args, **kwargs)`` on this worker's actor thread; its future."""
        with self._lock:
            actor = self._actors.get(key) if self._alive else None
            if actor is None:
                raise RuntimeError(f"{LOST}: no actor {key!r} on {self.address}")
            return self._calls.submit(getattr(actor, method), *args, **kwargs)

    def lose(self) -> None:
        """The worker dies: its actors are gone, and calls not yet run are cancelled."""
        with self._lock:
            self._alive = False
            self._actors.clear()
        self._calls.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        with self._lock:
            self._actors.clear()
        self._calls.shutdown(wait=True, cancel_futures=True)


class ActorProxy:
    """Calls to one actor, each answered by a future (``result(timeout=...)``).

    ``caller``: the worker of the task that holds the proxy, if any; once it is lost the proxy sends
    nothing (a dead machine's threads may still run here, but its messages must not arrive).
    """

    def __init__(self, worker: Worker, key: str, caller: Worker | None = None) -> None:
        self._worker, self.key, self._caller = worker, key, caller

    @property
    def worker(self) -> str:
        return self._worker.address

    def __getattr__(self, name: str) -> Callable[..., Future]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Future:
            if self._caller is not None and not self._caller.alive:
                raise RuntimeError(f"{LOST}: the caller's worker {self._caller.address}")
            return self._worker.call(self.key, name, args, kwargs)

        return call

    def __repr__(self) -> str:
        return f"<in-process actor {self.key} on {self.worker}>"


class Placed:
    """An actor's hold on its worker (a Dask actor's Future): ``release()`` drops it there."""

    def __init__(self, worker: Worker, key: str) -> None:
        self.worker, self.key = worker, key

    def release(self) -> None:
        self.worker.remove(self.key)


class Task(Future):
    """A long-running task on a thread of its own: a ``Future`` whose ``status`` reads as a Dask Future's."""

    _numbers = itertools.count()

    def __init__(self, worker: Worker, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict,
                 enter: Callable[[Worker], Any]) -> None:
        super().__init__()
        self.worker, self.key = worker, key
        self._forgotten = False
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs, enter), daemon=True,
                                        name=f"dbkit-task-{next(self._numbers)}-{key}")
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple, kwargs: dict, enter: Callable[[Worker], Any]) -> None:
        if not self.worker.alive or not self.set_running_or_notify_cancel():
            return  # sent to a worker that had died: it never runs, and reads as lost
        try:
            with enter(self.worker):
                value = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - the task's error is its future's, as on Dask
            self.set_exception(e)
        else:
            self.set_result(value)

    @property
    def status(self) -> str:
        """pending, finished, error, cancelled, or lost (its worker died, whether or not it had finished)."""
        if self._forgotten:
            return "cancelled"
        if not self.worker.alive:
            return "lost"
        if not self.done():
            return "pending"
        return "error" if super().exception() is not None else "finished"

    def result(self, timeout: float | None = None) -> Any:
        if self._forgotten:
            raise CancelledError(self.key)
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._forgotten:
            return CancelledError(self.key)
        return super().exception(timeout)

    def cancel(self) -> bool:
        """Forget the result (a running thread cannot be stopped: a replica ends when told to stop)."""
        self._forgotten = True
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; whether it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
