"""The replica's side of the parameter server: fetch from all shards, push each its slice, and the handle of
a call to every shard that is under way.

Works with plain ``ParameterShard`` objects and with Dask actor proxies alike:
calls to every shard are issued first and resolved after, so on Dask the
shards serve them concurrently. DistBelief's Downpour client "starts
asynchronously fetching parameters" and "pushing gradients" (the paper's
appendix) and computes on meanwhile. A ``Pending`` holds one call per shard;
``ready()`` says, without waiting, whether every answer is in, and
``result()`` waits for them and combines them once. Plain values (in-process
shards, which answer at once) are ready at once; anything with ``done()`` and
``result()`` (a Dask actor future, a ``concurrent.futures.Future``) is ready
when done. Every wait for a shard's answer is bounded (``CALL_TIMEOUT``,
through ``resolve``). No Dask import.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

import numpy as np

from .layout import ShardLayout
from .owned_end import OwnedEnd
from .records import PushAnswer, ShardFigures
from .update_rule import UpdateRule

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

class ShardedParameters:
    """A client view of parameters spread over shards.

    Parameters
    ----------
    shards : sequence
        One ``ParameterShard`` (or actor proxy of one) per range in ``layout``.
    layout : ShardLayout
    workers : sequence of str, optional
        Where each shard lives (for reports); ``"local"`` by default.
    name : str, optional
        Who pushes through this client; shards count accepted pushes per name.
    """

    def __init__(self, shards: Sequence, layout: ShardLayout, workers: Sequence[str] | None = None,
                 name: str | None = None) -> None:
        if len(shards) != layout.n_shards:
            raise ValueError(f"{len(shards)} shards given for a layout of {layout.n_shards}")
        self.shards = list(shards)
        self.workers = list(workers) if workers is not None else ["local"] * layout.n_shards
        self.layout = layout
        self.name = name
        self.versions = [0] * layout.n_shards
        self.bytes_fetched = 0
        self.bytes_pushed = 0

    def fetch(self) -> np.ndarray:
        """Fetch every shard; returns the full float32 vector and remembers the versions."""
        return self.start_fetch().result()

    def start_fetch(self) -> Pending[np.ndarray]:
        """Ask every shard for its parameters and return at once; ``result()`` assembles them (and takes
        their versions as this client's) when they arrive."""
        out = np.empty(self.layout.size, dtype=np.float32)
        calls = [s.fetch(into=out[a:b]) if owned_end(s) else s.fetch()
                 for s, (a, b) in zip(self.shards, self.layout.ranges)]
        return Pending(calls, lambda fetched: self._assemble(fetched, out))

    def start_push(self, grad: np.ndarray, examples: int = 0, first_versions: Sequence[int] | None = None,
                   versions: Sequence[int] | None = None) -> Pending[list[PushAnswer]]:
        """``push`` without waiting: the shards' answers come with ``result()``. ``grad`` must not
        change until they have come (a shard on this worker may read it in place)."""
        return Pending(self._send("push", grad, versions, examples, first_versions), self._answered)

    def start_push_fetch(self, grad: np.ndarray, examples: int = 0, first_versions: Sequence[int] | None = None,
                         versions: Sequence[int] | None = None) -> Pending[tuple[list[PushAnswer], np.ndarray]]:
        """``push_fetch`` without waiting; ``result()`` gives ``(answers, parameters)``."""
        out = np.empty(self.layout.size, dtype=np.float32)
        return Pending(self._send("push_fetch", grad, versions, examples, first_versions, out),
                       lambda results: self._answered_and_fetched(results, out))

    def push(self, grad: np.ndarray, versions: Sequence[int] | None = None, examples: int = 0,
             first_versions: Sequence[int] | None = None) -> list[PushAnswer]:
        """Push each shard its slice of ``grad``; returns each shard's answer.

        ``versions`` defaults to those of the last ``fetch``. ``examples`` is how
        many examples' gradients ``grad`` sums, and ``first_versions`` the
        versions fetched before its oldest gradient (default ``versions``):
        with them each shard measures the push's age in examples.
        """
        return self._answered([resolve(p) for p in self._send("push", grad, versions, examples, first_versions)])

    def push_fetch(self, grad: np.ndarray, versions: Sequence[int] | None = None, examples: int = 0,
                   first_versions: Sequence[int] | None = None) -> tuple[list[PushAnswer], np.ndarray]:
        """``push`` then ``fetch``, one message per shard; returns ``(answers, parameters)``."""
        return self._answered_and_fetched(
            [resolve(p) for p in self._send("push_fetch", grad, versions, examples, first_versions)])

    def _send(self, method: str, grad: np.ndarray, versions: Sequence[int] | None, examples: int,
              first_versions: Sequence[int] | None, out: np.ndarray | None = None) -> list:
        """Call ``method`` on every shard with its slice of ``grad``; a ``push_fetch`` given ``out`` has the
        shards that can (an ``OwnedEnd``) write their parameters straight into it."""
        grad = np.asarray(grad, dtype=np.float32)
        if grad.shape != (self.layout.size,):
            raise ValueError(f"gradient has shape {grad.shape}, parameters have ({self.layout.size},)")
        versions = list(self.versions if versions is None else versions)
        firsts = list(versions if first_versions is None else first_versions)
        named: dict = {"examples": int(examples)}
        if self.name is not None:
            named["pusher"] = self.name
        calls = []
        for s, (a, b), v, f in zip(self.shards, self.layout.ranges, versions, firsts):
            call = getattr(s, method)
            if out is not None and owned_end(s):
                calls.append(call(grad[a:b], int(v), first_version=int(f), into=out[a:b], **named))
            else:
                calls.append(call(grad[a:b], int(v), first_version=int(f), **named))
        return calls

    def _answered(self, answers: list[PushAnswer]) -> list[PushAnswer]:
        self._count_pushed(answers)
        return answers

    def _answered_and_fetched(self, results: list, out: np.ndarray | None = None
                              ) -> tuple[list[PushAnswer], np.ndarray]:
        return self._answered([r[0] for r in results]), self._assemble([r[1:] for r in results], out)

    def _count_pushed(self, answers: list[PushAnswer]) -> None:
        self.bytes_pushed += sum(4 * (b - a) for (a, b), r in zip(self.layout.ranges, answers) if r.accepted)

    def _assemble(self, fetched: list, out: np.ndarray | None = None) -> np.ndarray:
        """The full vector from each shard's ``(version, values)``, taking their versions; values a shard
        already wrote into ``out`` (``owned_end``) are not copied again."""
        out = np.empty(self.layout.size, dtype=np.float32) if out is None else out
        for i, ((a, b), (version, values)) in enumerate(zip(self.layout.ranges, fetched)):
            if not np.may_share_memory(values, out):
                out[a:b] = values
            self.versions[i] = version
        self.bytes_fetched += out.nbytes
        return out

    # ---- commands on named vectors (Sandblaster's coordinator): scalars only ----
    def _all(self, method: str, *args) -> list:
        return [resolve(p, CALL_TIMEOUT) for p in [getattr(s, method)(*args) for s in self.shards]]

    def save_vectors(self, directory: str, names: list[str], model: str, iteration: int) -> list[str]:
        """Every shard writes vectors ``names`` to its checkpoint of ``iteration``; returns the files."""
        return self._all("save_vectors", directory, names, model, iteration)

    def load_vectors(self, states: list) -> None:
        """Shard ``i`` takes the vectors of ``states[i]`` (``VectorState``s, one per shard)."""
        for p in [s.load_vectors(st.vectors) for s, st in zip(self.shards, states)]:
            resolve(p, CALL_TIMEOUT)

    def dot(self, a: str, b: str) -> float:
        """``a . b`` over the whole vector: each shard's part, summed here."""
        return float(sum(self._all("vectors", "dot", a, b)))

    def axpy(self, alpha: float, x: str, y: str) -> None:
        self._all("vectors", "axpy", float(alpha), x, y)

    def scale(self, alpha: float, x: str) -> None:
        self._all("vectors", "scale", float(alpha), x)

    def copy(self, src: str, dst: str) -> None:
        self._all("vectors", "copy", src, dst)

    def zero(self, name: str) -> None:
        self._all("vectors", "zero", name)

    def drop(self, name: str) -> None:
        self._all("vectors", "drop", name)

    def fetch_vector(self, name: str) -> np.ndarray:
        """A whole named vector (replicas fetch trial parameters this way; the coordinator never does)."""
        return self._assemble([resolve(p) for p in [s.fetch_vector(name) for s in self.shards]])

    def accumulate(self, name: str, values: np.ndarray, units: tuple = (),
                   skip: frozenset = frozenset()) -> list[PushAnswer]:
        """Add each shard (except those in ``skip``) its slice of ``values`` into vector ``name``."""
        values = np.asarray(values, dtype=np.float32)
        pending = [None if i in skip else s.accumulate(name, values[a:b], tuple(units))
                   for i, (s, (a, b)) in enumerate(zip(self.shards, self.layout.ranges))]
        answers = [PushAnswer(True, reason="skipped") if p is None else resolve(p) for p in pending]
        self._count_pushed(answers)
        return answers

    def landed(self, name: str) -> list[set]:
        """Per shard, the work units already accumulated into ``name``."""
        return [set(x) for x in self._all("vectors", "landed_units", name)]

    def figures(self) -> list[ShardFigures]:
        """Each shard's ``figures()``, with the worker that holds it."""
        figures = [resolve(p) for p in [s.figures() for s in self.shards]]
        return [dataclasses.replace(f, worker=w) for w, f in zip(self.workers, figures)]

    def set_lr(self, lr: float) -> None:
        for p in [s.set_lr(lr) for s in self.shards]:
            resolve(p)

    def set_optimizer(self, optimizer: str | UpdateRule) -> None:
        """Every shard's update rule (see ``ParameterShard.set_optimizer``)."""
        for p in [s.set_optimizer(optimizer) for s in self.shards]:
            resolve(p)

    def state(self) -> list[dict]:
        return [resolve(p) for p in [s.state() for s in self.shards]]

    def close(self) -> None:
        """End this client's own ends of its shards (``OwnedEnd``s: ``WireShard`` connections, ``ThreadedShard``
        threads); the shards stay. Calls already made are answered first."""
        for s in self.shards:
            if owned_end(s):
                s.close()


def owned_end(shard) -> bool:
    """Whether ``shard`` is an end this client owns (an ``OwnedEnd``: a ``WireShard``'s connection, a
    ``ThreadedShard``'s thread, a simulated ``ShardEnd``): it writes fetched parameters into a given array
    (``into=``) and must be closed. An actor proxy is neither: it answers with a fresh array, which is
    copied in."""
    return isinstance(shard, OwnedEnd)
