"""A call to every shard that is under way: the handle of an asynchronous fetch or push.

DistBelief's Downpour client "starts asynchronously fetching parameters" and
"pushing gradients" (the paper's appendix) and computes on meanwhile. A
``Pending`` holds one call per shard; ``ready()`` says, without waiting,
whether every answer is in, and ``result()`` waits for them and combines them
once. Plain values (in-process shards, which answer at once) are ready at
once; anything with ``done()`` and ``result()`` (a Dask actor future, a
``concurrent.futures.Future``) is ready when done. Every wait for a shard's
answer is bounded (``CALL_TIMEOUT``, through ``resolve``). No Dask import.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Generic, TypeVar

#: seconds a replica waits for one shard's answer. An actor call to a shard whose worker died can
#: wait for ever (Dask cancels the actor's key, and the call's future is never set), so every wait
#: is bounded; the replica then ends, saying which call did not answer.
CALL_TIMEOUT = 30.0


def resolve(value, timeout: float | None = None):
    """The value of a plain result or of a future-like object with ``.result()``, waiting at most
    ``timeout`` seconds where the object can be told (``TimeoutError`` after it)."""
    result = getattr(value, "result", None)
    if not callable(result):
        return value
    if timeout is None or not _takes_timeout(type(value)):
        return result()
    try:
        return result(timeout=timeout)
    except TimeoutError as e:
        raise TimeoutError(f"a parameter shard did not answer within {timeout:g}s (its worker may be gone)") from e


_TAKES_TIMEOUT: dict[type, bool] = {}


def _takes_timeout(kind: type) -> bool:
    """Whether ``kind.result`` takes ``timeout`` (a Dask actor future, a ``concurrent.futures.Future``)."""
    known = _TAKES_TIMEOUT.get(kind)
    if known is None:
        try:
            known = "timeout" in inspect.signature(kind.result).parameters  # type: ignore[attr-defined]
        except (TypeError, ValueError):
            known = False
        _TAKES_TIMEOUT[kind] = known
    return known


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
