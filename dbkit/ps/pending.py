"""A call to every shard that is under way: the handle of an asynchronous fetch or push.

DistBelief's Downpour client "starts asynchronously fetching parameters" and
"pushing gradients" (the paper's appendix) and computes on meanwhile. A
``Pending`` holds one call per shard; ``ready()`` says, without waiting,
whether every answer is in, and ``result()`` waits for them and combines them
once. Plain values (in-process shards, which answer at once) are ready at
once; anything with ``done()`` and ``result()`` (a Dask actor future, a
``concurrent.futures.Future``) is ready when done. No Dask import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from .client_calls import CALL_TIMEOUT, resolve

T = TypeVar("T")


class Pending(Generic[T]):
    """Answers still to come from ``calls`` (one per shard), combined by ``finish`` when taken."""

    def __init__(self, calls: list, finish: Callable[[list], T]) -> None:
        self._calls, self._finish = calls, finish
        self._value: T | None = None
        self._taken = False

    def ready(self) -> bool:
        """True when every shard has answered (never waits)."""
        if self._taken:
            return True
        for c in self._calls:
            done = getattr(c, "done", None)  # a plain value has none: it is in
            if done is not None and not done():
                return False
        return True

    def result(self) -> T:
        """The combined answers, waiting for them if need be; combined (and counted) once."""
        if not self._taken:
            self._value = self._finish([resolve(c, CALL_TIMEOUT) for c in self._calls])
            self._taken = True
        return self._value  # type: ignore[return-value]
