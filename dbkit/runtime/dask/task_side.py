"""A task's own side of its Dask worker (``dbkit.runtime.protocol.TaskSide``), and a gather that fails fast."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from ..clock import REAL_TIME, Clock

T = TypeVar("T")


class DaskTaskSide:
    """``TaskSide`` for a task running on a Dask worker: made where the task runs, or made on the driver and
    sent with an actor's arguments (it finds its worker where it is first asked, and is sent without it)."""

    def __init__(self) -> None:
        self._found: Any = None

    @property
    def _worker(self) -> Any:
        if self._found is None:
            from distributed import get_worker

            self._found = get_worker()
        return self._found

    def __getstate__(self) -> dict:
        return {"_found": None}

    @property
    def address(self) -> str:
        return str(self._worker.address)

    @property
    def time(self) -> Clock:
        return REAL_TIME

    def computing(self, network: Any) -> Any:
        return network

    def gather(self, calls: list) -> list:
        """The answers of actor calls, awaited on the worker's event loop (where its actors' async methods run)."""
        return fail_fast(self._worker.loop)(calls)

    def local(self, key: str) -> Any | None:
        return self._worker.state.actors.get(key)

    def same_process(self, worker: str, key: str) -> Any | None:
        return self.local(key) if worker == self.address else None

    def remote(self, cls: type, worker: str, key: str) -> Any:
        from distributed.actor import Actor

        return Actor(cls, worker, key)

    def leave_slot(self) -> None:
        from distributed import secede

        secede()

    def one_blas_thread(self) -> Any:
        """Numpy's BLAS limited to one thread while the block runs: processes, not BLAS threads, share the
        cores (each task's limit is its worker process's)."""
        from threadpoolctl import threadpool_limits

        return threadpool_limits(1)

    def while_alive(self, read: Callable[[], T]) -> Callable[[], T]:
        """``read`` itself: a lost Dask worker's process, and the task with it, is gone."""
        return read


def fail_fast(loop: Any) -> Callable[[list], list]:
    """A ``gather`` for actor calls made from a task: all results, or the first error at once."""
    from distributed.utils import sync

    async def wait(call: Any) -> Any:
        return await call

    def gather(calls: list) -> list:
        async def run() -> list:
            tasks = [asyncio.ensure_future(wait(c)) for c in calls]
            try:
                return list(await asyncio.gather(*tasks))
            except BaseException:
                for t in tasks:
                    t.cancel()
                raise

        return sync(loop, run)

    return gather
