"""What a Downpour driver last read from each parameter shard, so a shard whose worker died ends a job
cleanly instead of taking its report with it.

DistBelief's shards come back from checkpoints (Sec. 4.1; issue #13). Until
they do, what the driver last saw is all there is of a lost shard: the job
keeps the surviving shards' parameters, fresh, and the lost one's as last
read, and says so. No call here waits on a dead peer for more than ``timeout``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from ..ps import ShardedParameters, ShardFigures
from ..runtime.bounded_wait import wait_unless_gone

TIMEOUT = 30.0  # seconds a driver waits for one shard's answer before counting it lost


def answer(call, timeout: float, gone: Callable[[], bool] | None = None):  # noqa: ANN001, ANN202
    """The result of ``call`` (an actor future, or a plain value), waiting at most ``timeout`` seconds;
    with ``gone``, ``WorkerLeft`` (a ``ConnectionError``) as soon as ``gone()`` says the answering worker
    has left the cluster (``wait_unless_gone``; issue #21: a checkpoint begun as a shard's worker died
    held the job's monitor for the whole timeout, past the run's end)."""
    result = getattr(call, "result", None)
    if not callable(result):
        return call
    if gone is None:
        return result(timeout=timeout)
    return wait_unless_gone(result, timeout, gone)


def never_gone(worker: str) -> bool:  # noqa: ARG001 - the default: only the timeout ends a wait
    return False


class LastRead:
    """The parameters (server order) and figures last read from each shard, and which shards are lost.

    ``gone(worker)`` says whether a worker has left the cluster: a wait on its shard ends then, not at
    ``timeout``."""

    def __init__(self, timeout: float = TIMEOUT, gone: Callable[[str], bool] = never_gone) -> None:
        self.timeout, self.gone = timeout, gone
        self.params: np.ndarray | None = None
        self.figures: dict[int, ShardFigures] = {}
        self.lost: dict[int, str] = {}  # shard -> why

    def reset(self, params: np.ndarray | None = None) -> None:
        """New shards (a re-layout) starting from ``params`` (server order; copied): nothing read from them
        yet, none lost."""
        self.params = None if params is None else params.copy()
        self.figures, self.lost = {}, {}

    def parameters(self, server: ShardedParameters) -> np.ndarray:
        """Every shard's parameters in server order: fresh where a shard answers, as last read where not
        (that shard is then counted lost). ``RuntimeError`` if a lost shard was never read."""
        out = np.empty(server.layout.size, dtype=np.float32)
        for i, (shard, worker, (a, b)) in enumerate(zip(server.shards, server.workers, server.layout.ranges)):
            try:
                version, values = self.answer(shard.fetch(), worker)
                out[a:b] = values
                server.versions[i] = version
            except Exception as e:  # noqa: BLE001 - its worker died (or does not answer): use what was read
                self.mark_lost(i, f"{type(e).__name__}: {e}")
                if self.params is None:
                    raise RuntimeError(f"parameter shard {i} is lost ({self.lost[i]}) and was never read") from e
                out[a:b] = self.params[a:b]
        self.params = out.copy()
        return out

    def answer(self, call, worker: str):  # noqa: ANN001, ANN201 - an actor future or a plain value
        """``call``'s result from a shard on ``worker``: bounded by ``timeout``, and failing as soon as
        ``worker`` leaves the cluster."""
        return answer(call, self.timeout, lambda: self.gone(worker))

    def mark_lost(self, index: int, why: str) -> None:
        """Shard ``index`` is lost (the first reason given stays)."""
        self.lost.setdefault(index, why)

    def version_of(self, index: int, server: ShardedParameters) -> int:
        """The newest version of shard ``index`` the driver has read (fetch or figures)."""
        f = self.figures.get(index)
        return max(server.versions[index], f.version if f is not None else 0)

    def restored(self, index: int, span: tuple[int, int], params: np.ndarray) -> None:
        """Shard ``index`` came back (from a checkpoint) holding ``params`` over ``span``: no longer lost."""
        self.lost.pop(index, None)
        self.figures.pop(index, None)
        if self.params is not None:
            self.params[span[0]:span[1]] = params

    def shard_figures(self, server: ShardedParameters) -> list[ShardFigures]:
        """Each shard's figures, fresh where it answers; a lost shard's as last read, its worker marked."""
        out = []
        for i, (shard, worker, (a, b)) in enumerate(zip(server.shards, server.workers, server.layout.ranges)):
            try:
                f = dataclasses.replace(self.answer(shard.figures(), worker), worker=worker)
                self.figures[i] = f
            except Exception as e:  # noqa: BLE001
                self.mark_lost(i, f"{type(e).__name__}: {e}")
                last = self.figures.get(i) or ShardFigures(i, a, b, 0, 0, 0, "sgd", 0.0, 0, 0, 0)
                f = dataclasses.replace(last, worker=f"{worker} (lost)")
            out.append(f)
        return out

    def describe_lost(self, server: ShardedParameters) -> str:
        """One line on the lost shards, for the job's end."""
        names = ", ".join(f"shard {i} on {server.workers[i]}" for i in sorted(self.lost))
        return (f"lost parameter {names} (its worker died: {next(iter(self.lost.values()))}). Without a checkpoint "
                f"a shard cannot come back; the report keeps the other shards' parameters and the lost ones' as "
                f"last read")
