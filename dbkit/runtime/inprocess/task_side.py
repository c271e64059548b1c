"""A task's own side of an in-process worker: which worker it runs on, and the actors beside it."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

from ..clock import REAL_TIME, Clock
from .workers import LOST, ActorProxy, Worker

T = TypeVar("T")

class InProcessTaskSide:
    """``dbkit.runtime.TaskSide`` for a task on an in-process worker."""

    def __init__(self, worker: Worker, workers: dict[str, Worker]) -> None:
        self._worker, self._workers = worker, workers

    @property
    def address(self) -> str:
        return self._worker.address

    @property
    def time(self) -> Clock:
        return REAL_TIME

    def computing(self, network: Any) -> Any:
        return network

    def local(self, key: str) -> Any | None:
        return self._worker.get(key)

    def same_process(self, worker: str, key: str) -> Any | None:
        w = self._workers.get(worker)
        return None if w is None or not w.alive else w.get(key)

    def remote(self, cls: type, worker: str, key: str) -> Any:
        if worker not in self._workers:
            raise RuntimeError(f"no in-process worker {worker}")
        return ActorProxy(self._workers[worker], key, caller=self._worker)

    def leave_slot(self) -> None:
        """Nothing to give up: every in-process task has a thread of its own."""

    def gather(self, calls: list) -> list:
        """The answers of ``calls`` (futures), in order; the first error as soon as one fails."""
        done, pending = concurrent.futures.wait(calls, return_when=concurrent.futures.FIRST_EXCEPTION)
        failed = next((c for c in calls if c in done and c.exception() is not None), None)
        if failed is not None:
            for c in pending:
                c.cancel()
            raise failed.exception()
        return [c.result() for c in calls]

    def one_blas_thread(self) -> AbstractContextManager[Any]:
        """Nothing: in one process a BLAS thread limit would be every thread's, the driver's too."""
        return nullcontext()

    def while_alive(self, read: Callable[[], T]) -> Callable[[], T]:
        """``read``, raising ``RuntimeError`` once this worker is lost: a thread cannot be killed, so a
        task on a lost worker ends at its next step, as the worker's death would have ended it."""
        worker = self._worker

        def checked() -> T:
            if not worker.alive:
                raise RuntimeError(f"{LOST}: {worker.address}")
            return read()

        return checked

