"""A shard in this process whose fetches and pushes run on a thread of their own.

A replica on the same worker as one of its shards calls it in process: no
serialisation and no socket. Called in line, the shard's arithmetic and the
copy of its parameters would still take the replica's own thread; through a
``ThreadedShard`` they run beside it (numpy releases the GIL), and the answers
come back as futures, like a remote shard's. Calls run one at a time, in the
order they were made, so a push before a fetch is applied before it.
Everything else (figures, learning rate, ...) is called directly.

Every replica's end of one shard shares that shard's one call thread (the
calls would wait for the shard's lock in turn anyway): a worker holds a
thread per shard, not one per replica. No Dask import.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from .owned_end import OwnedEnd


class ThreadedShard(OwnedEnd):
    """``shard``'s ``fetch``, ``push`` and ``push_fetch`` on one thread of their own, answered as futures."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self._calls = _CALLS.join(shard)
        self._last: Future | None = None  # this end's last call (``close`` waits for it)
        self._closed = False

    def _submit(self, fn: Any, *args: Any) -> Future:
        if self._closed:
            raise RuntimeError("this end of the shard is closed")
        self._last = self._calls.submit(fn, *args)
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
        """Finish the calls already made; the shard's call thread ends with its last end. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._last is not None:
            wait([self._last])
        _CALLS.leave(self.shard)


class ShardCallThreads:
    """One call thread per shard of this process, shared by the ends that call it, ended with the last."""

    def __init__(self) -> None:
        # lock order: a leaf (the table of threads and how many ends use each)
        self._lock = threading.Lock()
        self._threads: dict[int, tuple[ThreadPoolExecutor, int]] = {}

    def join(self, shard: Any) -> ThreadPoolExecutor:
        with self._lock:
            calls, ends = self._threads.get(id(shard), (None, 0))
            if calls is None:
                calls = ThreadPoolExecutor(1, thread_name_prefix="dbkit-shard-call")
            self._threads[id(shard)] = (calls, ends + 1)
            return calls

    def leave(self, shard: Any) -> None:
        with self._lock:
            calls, ends = self._threads[id(shard)]
            if ends > 1:
                self._threads[id(shard)] = (calls, ends - 1)
                return
            del self._threads[id(shard)]
        calls.shutdown(wait=True)


_CALLS = ShardCallThreads()
