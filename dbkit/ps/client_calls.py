"""How a shard call's answer is read: a plain value, or a future-like object (no Dask import)."""

from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import Future


def resolve(value):
    """The value of a plain result or of a future-like object with ``.result()``."""
    result = getattr(value, "result", None)
    return result() if callable(result) else value


async def aresolve(value):
    """``resolve`` for code on an event loop: awaits what can be awaited (an actor call, a wire call)."""
    if isinstance(value, Future):  # a wire call (``WireShard``): awaited without blocking the loop
        return await asyncio.wrap_future(value)
    return await value if inspect.isawaitable(value) else resolve(value)
