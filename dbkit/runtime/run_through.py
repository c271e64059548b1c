"""Running a partition's step coroutine on a thread: it never suspends there, so it runs to its end at once.

A wired partition (``PartitionWorker.wire_up``) and a simulated one (which
waits through greenlets) run the same ``async`` step as an actor on an event
loop does; off the loop nothing in it awaits a future.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


def run_through(coroutine: Coroutine) -> Any:
    """Run ``coroutine``, which never suspends, to its end; its value."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    coroutine.close()
    raise RuntimeError("a partition's step awaited an event loop where it runs on a thread of its own")


def on_event_loop() -> bool:
    """Whether this thread runs an event loop now (an actor's method), where a wired step must not wait."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
