"""The actors one job placed, by name, each kept alive until released on purpose.

Dask deletes an actor when the client drops its Future, even if replicas still
hold proxies to it (DESIGN.md, Dask facts). Every actor dbkit creates, on Dask
or on an in-process worker, is registered here under a name with its hold on
its worker (``release()``), and released only on purpose. No Dask import.
"""

from __future__ import annotations

import gc
import threading
from typing import Any


class ActorRegistry:
    """Named actor Futures and their proxies."""

    def __init__(self) -> None:
        self._futures: dict[str, Any] = {}  # a Dask actor's Future, or anything with ``release()``
        self._proxies: dict[str, Any] = {}
        self._workers: dict[str, str] = {}
        # lock order: leaf (the names, futures and proxies of placed actors)
        self._lock = threading.Lock()

    def add(self, name: str, future, proxy, worker: str) -> None:
        with self._lock:
            if name in self._futures:
                raise KeyError(f"an actor named {name!r} is already registered")
            self._futures[name], self._proxies[name], self._workers[name] = future, proxy, worker

    def proxy(self, name: str):
        return self._proxies[name]

    def worker(self, name: str) -> str:
        return self._workers[name]

    def names(self) -> list[str]:
        with self._lock:
            return list(self._futures)

    def release(self, *names: str) -> None:
        """Drop actors: their Futures are released, so Dask deletes them (after one ``collect_proxies``)."""
        for name in names:
            with self._lock:
                future = self._futures.pop(name, None)
                self._proxies.pop(name, None)
                self._workers.pop(name, None)
            if future is not None:
                try:
                    future.release()
                except Exception:  # noqa: BLE001 - the client may already be closed
                    pass
        if names:
            collect_proxies()

    def clear(self) -> None:
        self.release(*self.names())

    def __len__(self) -> int:
        return len(self._futures)


def collect_proxies() -> None:
    """Collect the reference cycles that actor calls leave behind, so released actors really go.

    Every call on a Dask actor proxy builds closures that refer back to the
    proxy, and each proxy holds a Future of its actor: until the garbage
    collector runs, the scheduler sees the actor as still wanted and keeps it
    on its worker. A driver that allocates little (replicas on the shard wire)
    may not collect for many seconds, so ``ActorRegistry.release`` collects once
    after each release (measured: a lost replica's partition stayed 10 s).
    """
    gc.collect()
