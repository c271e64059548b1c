"""How a shard call's answer is read: a plain value, or a future-like object (no Dask import)."""

from __future__ import annotations

import inspect

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
