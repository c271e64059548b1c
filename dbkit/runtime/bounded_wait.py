"""Waiting for another machine's answer without waiting on a machine that has left the cluster.

A call to an actor whose worker died may never be answered (Dask cancels the
actor's key and leaves the call's future unset), and reading a result held on a
machine that was stopped waits for the connect timeouts. So every such wait here
is cut into slices, and between slices the caller is asked whether the answering
worker is still in the cluster (issue #21). No Dask import: ``result`` is any
``result(timeout=...)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

SLICE = 0.5  # seconds between asking whether the answering worker is still in the cluster


class WorkerLeft(ConnectionError):
    """The worker that was to answer left the cluster while it was waited for."""


def wait_unless_gone(result: Callable[..., Any], timeout: float | None, gone: Callable[[], bool],
                     slice_seconds: float = SLICE) -> Any:
    """``result(timeout=...)``, waiting at most ``timeout`` seconds in all (``None``: as long as the worker
    is there) in slices of ``slice_seconds``; ``WorkerLeft`` as soon as ``gone()`` says the answering worker
    has left, ``TimeoutError`` at the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = slice_seconds if deadline is None else min(slice_seconds, max(0.01, deadline - time.monotonic()))
        try:
            return result(timeout=left)
        except TimeoutError:
            if gone():
                raise WorkerLeft("its worker left the cluster") from None
            if deadline is not None and time.monotonic() >= deadline:
                raise
