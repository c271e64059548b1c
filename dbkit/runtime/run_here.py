"""``Runtime.run_on_workers`` for runtimes whose workers are in this process (in process, simulated)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_here(workers: list[str], fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
    """``fn(*args)`` once for each of ``workers``, in this process: its value, or the exception it raised, by
    worker (as ``distributed.Client.run(..., on_error="return")`` answers)."""
    answers: dict[str, Any] = {}
    for w in workers:
        try:
            answers[w] = fn(*args)
        except Exception as e:  # noqa: BLE001 - the answer is the error
            answers[w] = e
    return answers
