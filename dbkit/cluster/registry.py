"""Keeps the Futures of actors alive.

Dask deletes an actor when the client drops its Future, even if replicas still
hold proxies to it (DESIGN.md, Dask facts). Every actor dbkit creates is
registered here under a name and released only on purpose.
"""

from __future__ import annotations

import threading


class ActorRegistry:
    """Named actor Futures and their proxies."""

    def __init__(self) -> None:
        self._futures: dict[str, object] = {}
        self._proxies: dict[str, object] = {}
        self._workers: dict[str, str] = {}
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

    def release(self, name: str) -> None:
        """Drop one actor: its Future is released, so Dask deletes it."""
        with self._lock:
            future = self._futures.pop(name, None)
            self._proxies.pop(name, None)
            self._workers.pop(name, None)
        if future is not None:
            try:
                future.release()
            except Exception:  # noqa: BLE001 - the client may already be closed
                pass

    def clear(self) -> None:
        for name in self.names():
            self.release(name)

    def __len__(self) -> int:
        return len(self._futures)
