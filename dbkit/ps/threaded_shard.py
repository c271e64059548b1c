"""A shard in this process whose fetches and pushes run on a thread of their own.

A replica on the same worker as one of its shards calls it in process: no
serialisation and no socket. Called in line, the shard's arithmetic and the
copy of its parameters would still take the replica's own thread; through a
``ThreadedShard`` they run beside it (numpy releases the GIL), and the answers
come back as futures, like a remote shard's. Calls run one at a time, in the
order they were made, so a push before a fetch is applied before it.
Everything else (figures, learning rate, ...) is called directly. No Dask import.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from .owned_end import OwnedEnd


class ThreadedShard(OwnedEnd):
    """``shard``'s ``fetch``, ``push`` and ``push_fetch`` on one thread of their own, answered as futures."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self._calls = ThreadPoolExecutor(1, thread_name_prefix="dbkit-shard-call")

    def fetch(self, into: np.ndarray | None = None) -> Future:
        """``(version, parameters)``; with ``into``, the parameters are written there (and it is returned)."""
        return self._calls.submit(self.shard.fetch, into)

    def push(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
             first_version: int | None = None) -> Future:
        return self._calls.submit(self.shard.push, grad, fetched_version, pusher, examples, first_version)

    def push_fetch(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
                   first_version: int | None = None, into: np.ndarray | None = None) -> Future:
        """``(answer, version, parameters)``; with ``into``, the parameters are written there."""
        return self._calls.submit(self.shard.push_fetch, grad, fetched_version, pusher, examples, first_version, into)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "shard" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.shard, name)

    def close(self) -> None:
        """Finish the calls already made, then end the thread. Safe to call twice."""
        self._calls.shutdown(wait=True)
