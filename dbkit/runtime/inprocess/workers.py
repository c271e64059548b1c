"""Workers in this process: each an address, the actors placed on it, one thread for their calls and
one event loop for their ``async`` methods.

As on a Dask worker, every call of an actor's plain method runs on that
worker's one actor thread, in the order the calls arrive, and an ``async``
method runs on the worker's event loop (a partition's, which awaits its
partners); either returns a future at once, which can also be awaited. The
arguments arrive as copies, as Dask's would unpickled. A task placed on a
worker runs on a thread of its own for as long as it likes (a seceded Dask
task). A lost worker's actors are gone: calls to them raise ``RuntimeError``,
as a Dask actor proxy's do.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

from ..given_up import given_up

LOST = "Worker holding Actor was lost"  # Dask's words, which the drivers already expect


class Answer(Future):
    """An actor call's answer: ``result(timeout=...)`` from a thread, ``await`` on an event loop."""

    def __await__(self):  # noqa: ANN204 - a generator, as asyncio's own
        return asyncio.wrap_future(self).__await__()


def _answer(source: Future) -> Answer:
    answer = Answer()

    def settle(done: Future) -> None:
        if done.cancelled():
            answer.cancel()
        elif done.exception() is not None:
            answer.set_exception(done.exception())
        else:
            answer.set_result(done.result())

    source.add_done_callback(settle)
    return answer


class Worker:
    """One in-process worker. ``_lock`` guards its actors, its event loop and whether it is alive."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._actors: dict[str, Any] = {}
        self._alive = True
        # lock order: leaf (the actor table and liveness; a call is submitted while held, run after)
        self._lock = threading.Lock()
        self._calls = ThreadPoolExecutor(1, thread_name_prefix=f"dbkit-{address}-actors")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

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

    def call(self, key: str, method: str, args: tuple, kwargs: dict, caller: Worker | None = None) -> Answer:
        """``actor.method(*args, **kwargs)`` on copies of the arguments: on this worker's actor thread, or
        (an ``async`` method) on its event loop; its answer.

        ``caller``: the worker that sent the call. If it is lost before the call runs, the call does not
        run (it raises ``RuntimeError``): a message still queued here when its machine died never arrived.
        Without this, a lost replica's push queued behind other calls landed after the coordinator had
        asked the shard what had landed and handed its unit to another replica, whose push of the same
        unit was then refused as a duplicate (a CI run lost both replicas so)."""
        args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
        with self._lock:
            actor = self._actors.get(key) if self._alive else None
            if actor is None:
                raise RuntimeError(f"{LOST}: no actor {key!r} on {self.address}")
            fn = getattr(actor, method)
            if inspect.iscoroutinefunction(fn):
                return _answer(asyncio.run_coroutine_threadsafe(fn(*args, **kwargs), self._event_loop()))
            return _answer(self._calls.submit(_unless_lost, caller, fn, *args, **kwargs))

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop, started on its own thread at the first ``async`` call (``_lock`` held)."""
        if self._loop is None:
            loop = asyncio.new_event_loop()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.run_forever()

            self._loop_thread = threading.Thread(target=run, daemon=True, name=f"dbkit-{self.address}-loop")
            self._loop_thread.start()
            self._loop = loop
        return self._loop

    def lose(self) -> None:
        """The worker dies: its actors are gone, calls not yet run are cancelled, its event loop stops."""
        with self._lock:
            self._alive = False
            self._actors.clear()
            loop = self._loop
        self._calls.shutdown(wait=False, cancel_futures=True)
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def close(self) -> None:
        with self._lock:
            self._actors.clear()
            loop, thread = self._loop, self._loop_thread
        self._calls.shutdown(wait=True, cancel_futures=True)
        if loop is not None and thread is not None:
            if thread.is_alive():
                loop.call_soon_threadsafe(loop.stop)
                thread.join(5)
            if not thread.is_alive():
                loop.close()


def _unless_lost(caller: Worker | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, on the actor thread, if the worker that sent the call is still alive."""
    if caller is not None and not caller.alive:
        raise RuntimeError(f"{LOST}: the caller's worker {caller.address}")
    return fn(*args, **kwargs)


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

    def __getattr__(self, name: str) -> Callable[..., Answer]:
        if name.startswith("_"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> Answer:
            if self._caller is not None and not self._caller.alive:
                raise RuntimeError(f"{LOST}: the caller's worker {self._caller.address}")
            return self._worker.call(self.key, name, args, kwargs, self._caller)

        return call

    def __deepcopy__(self, memo: dict) -> ActorProxy:
        return self  # a proxy sent along names the same actor, as a pickled Dask proxy does

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

    def __init__(self, worker: Worker, key: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        super().__init__()
        self.worker, self.key = worker, key
        self._forgotten = False
        self._thread = threading.Thread(target=self._run, args=(fn, args, kwargs), daemon=True,
                                        name=f"dbkit-task-{next(self._numbers)}-{key}")
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        if not self.worker.alive or not self.set_running_or_notify_cancel():
            return  # sent to a worker that had died: it never runs, and reads as lost
        try:
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
        """Wait for the thread to end; whether it has. A thread given up on (``dbkit.runtime.given_up``: a
        replica's step that never returned) is not waited for."""
        if given_up(self._thread):
            return False
        self._thread.join(timeout)
        return not self._thread.is_alive()
