"""A shard in this process whose fetches and pushes run on a thread of their own.

A replica on the same worker as one of its shards calls it in process: no
serialisation and no socket. Called in line, the shard's arithmetic and the
copy of its parameters would still take the replica's own thread; through a
``ThreadedShard`` they run beside it (numpy releases the GIL), and the answers
come back as futures, like a remote shard's. Calls run one at a time, in the
order they were made, so a push before a fetch is applied before it.
Everything else (figures, learning rate, ...) is called directly.

Every end of one shard in this process shares that shard's one call thread
(the calls would wait for the shard's lock in turn anyway): a worker holds a
thread per shard, not one per replica. The ends hold the thread; the table
that finds it holds it weakly, so it ends with its last end, closed or
dropped. No Dask import.
"""

from __future__ import annotations

import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from .owned_end import OwnedEnd


class ShardCalls:
    """One shard's call thread, and how many open ends use it; shut down when the last one closes."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="dbkit-shard-call")
        # lock order: a leaf (the count of open ends); taken inside _TABLE_LOCK by ``calls_for``
        self._lock = threading.Lock()
        self._ends = 0
        self.shut = False

    def join(self) -> bool:
        """Count one more end; False if this thread has already been shut down."""
        with self._lock:
            if self.shut:
                return False
            self._ends += 1
            return True

    def leave(self) -> None:
        """Count one end fewer; the last one to leave ends the thread (after the calls already made)."""
        with self._lock:
            self._ends -= 1
            last = self.shut = self._ends == 0
        if last:
            self.executor.shutdown(wait=True)


# lock order: taken before a ShardCalls' own lock (by ``calls_for``), never inside it
_TABLE_LOCK = threading.Lock()
_TABLE: weakref.WeakValueDictionary[int, ShardCalls] = weakref.WeakValueDictionary()


def calls_for(shard: Any) -> ShardCalls:
    """The call thread of ``shard`` in this process, joined: a new one if it has none or it was shut down.

    Keyed by ``id(shard)``: the ends hold the shard, so its id is not reused while the thread lives.
    """
    with _TABLE_LOCK:
        calls = _TABLE.get(id(shard))
        if calls is None or not calls.join():
            calls = _TABLE[id(shard)] = ShardCalls()
            calls.join()
        return calls


class ThreadedShard(OwnedEnd):
    """``shard``'s ``fetch``, ``push`` and ``push_fetch`` on its call thread, answered as futures."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self._calls = calls_for(shard)
        self._last: Future | None = None  # this end's last call (``close`` waits for it)
        self._closed = False

    def _submit(self, fn: Any, *args: Any) -> Future:
        if self._closed:
            raise RuntimeError("this end of the shard is closed")
        self._last = self._calls.executor.submit(fn, *args)
        return self._last

    def fetch(self, into: np.ndarray | None = None) -> Future:
        """``(version, parameters)``; with ``into``, the parameters are written there (and it is returned)."""
        return self._submit(self.shard.fetch, into)

    def push(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
             first_version: int | None = None) -> Future:
        return self._submit(self.shard.push, grad, fetched_version, pusher, examples, first_version)

    def push_fetch(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
                   first_version: int | None = None, into: np.ndarray | None = None) -> Future:
        """``(answer, version, parameters)``; with ``into``, the parameters are written there."""
        return self._submit(self.shard.push_fetch, grad, fetched_version, pusher, examples, first_version, into)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "shard" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.shard, name)

    def close(self) -> None:
        """Finish this end's calls; the shard's call thread ends with its last end. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._last is not None:
            wait([self._last])
        self._calls.leave()
