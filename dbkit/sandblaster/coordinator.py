"""Sandblaster L-BFGS's coordinator (DistBelief Sec. 4.2), independent of where it runs.

The coordinator drives L-BFGS with commands to the parameter shards (dot,
axpy, scale, copy) and receives only scalars; it never holds a full-length
vector. Batch gradients come from an *executor*: ``evaluate(name)`` returns the
batch loss at shard vector ``name`` and leaves the gradient in shard vector
``"acc"`` (in process: ``LocalBatch``; on Dask: work units handed to replicas).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..settings import check
from .lbfgs import HistoryPair, two_loop
from .line_search import wolfe_search


@dataclass(frozen=True)
class Iteration:
    """One L-BFGS iteration as the coordinator saw it (iteration 0: the starting point)."""

    iteration: int
    t: float  # seconds since the coordinator began
    loss: float
    grad_norm: float
    step: float  # the line search's accepted step length
    evaluations: int  # batch gradients this iteration took


@dataclass(frozen=True)
class CoordinatorState:
    """What the coordinator holds between iterations (the vectors stay on the shards): enough, with
    the shards' ``params``, ``grad`` and history vectors, to go on from this iteration."""

    history: tuple[HistoryPair, ...]
    slot: int
    f: float
    grad_norm: float
    rows: tuple[Iteration, ...]
    evaluations: int

    @property
    def iteration(self) -> int:
        return len(self.rows) - 1

    @property
    def vectors(self) -> list[str]:
        """The shard vectors this state needs: parameters, gradient and every history pair."""
        return ["params", "grad", *(name for p in self.history for name in (p.s, p.y))]

    def to_dict(self) -> dict:
        return {"history": [[p.s, p.y, p.rho] for p in self.history], "slot": self.slot, "f": self.f,
                "grad_norm": self.grad_norm, "rows": [dataclasses.astuple(r) for r in self.rows],
                "evaluations": self.evaluations}

    @classmethod
    def from_dict(cls, d: dict) -> CoordinatorState:
        """A saved state, checked: each pair's ``rho = 1 / (y . s)`` finite and positive (L-BFGS keeps a pair
        only where the curvature ``y . s`` is positive), ``ValueError`` naming the pair otherwise."""
        history = tuple(HistoryPair(str(s), str(y), float(rho)) for s, y, rho in d["history"])
        for i, pair in enumerate(history):
            if not (math.isfinite(pair.rho) and pair.rho > 0):
                raise ValueError(f"history pair {i} ({pair.s}, {pair.y}) has rho {pair.rho!r}: it must be finite "
                                 "and positive (1 / (y . s), kept only where y . s > 0)")
        return cls(history, int(d["slot"]), float(d["f"]), float(d["grad_norm"]),
                   tuple(Iteration(*r) for r in d["rows"]), int(d["evaluations"]))



class LBFGSCoordinator:
    """L-BFGS over sharded vectors, one iteration at a time.

    Parameters
    ----------
    ops : ShardedParameters-like
        ``dot``, ``axpy``, ``scale``, ``copy``, ``drop`` over named vectors.
    evaluate : callable
        ``evaluate(name) -> loss`` with the gradient left in vector ``"acc"``.
    memory : int
        History pairs kept (m); older pairs are dropped from the shards.
    max_iterations : int
        ``iterate`` stops after this many iterations.
    gtol, ftol : float
        Stop when ``||g|| <= gtol`` or when the loss falls by less than
        ``ftol * max(|f|, 1)`` in an iteration (as scipy's L-BFGS-B ``factr``).

    ``begin()`` evaluates the starting point; each ``iterate()`` runs one
    iteration and returns its row, or ``None`` once a stopping rule holds
    (``stop_reason`` says which). ``run()`` does both to the end.
    """

    def __init__(self, ops, evaluate: Callable[[str], float], memory: int = 10, max_iterations: int = 100,
                 gtol: float = 1e-5, ftol: float = 1e-9, c1: float = 1e-4, c2: float = 0.9,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock  # the seconds its rows' ``t`` count (a simulation's virtual clock)
        self.memory, self.max_iterations = check("memory", memory), check("iterations", max_iterations)
        self.gtol, self.ftol = check("gtol", gtol), check("ftol", ftol)
        self.ops, self.evaluate = ops, evaluate
        self.c1, self.c2 = c1, c2
        self.history: list[HistoryPair] = []
        self.rows: list[Iteration] = []
        self.evaluations = 0
        self.stop_reason = ""
        self._slot = 0
        self._last_t: float | None = None
        self._f = math.nan
        self._gnorm = math.nan
        self._start = 0.0

    def use(self, ops) -> None:  # noqa: ANN001 - ShardedParameters-like, or None
        """Send commands to ``ops`` from now on (shards brought back from a checkpoint; ``None``: the job
        released its shards)."""
        self.ops = ops

    @property
    def done(self) -> bool:
        return bool(self.stop_reason)

    def state(self) -> CoordinatorState:
        """Its state between iterations (after ``begin()`` or an ``iterate()``)."""
        return CoordinatorState(tuple(self.history), self._slot, self._f, self._gnorm, tuple(self.rows),
                                self.evaluations)

    def restore(self, state: CoordinatorState) -> None:
        """Go back to ``state`` (the shards hold its vectors again): the next ``iterate()`` redoes the
        iteration after it."""
        self.history, self._slot = list(state.history), state.slot
        self._f, self._gnorm = state.f, state.grad_norm
        self.rows, self.evaluations = list(state.rows), state.evaluations
        self.stop_reason, self._last_t = "", None

    def _eval(self, name: str) -> float:
        self.evaluations += 1
        f = self.evaluate(name)
        if not math.isfinite(f):
            if name == "params":
                raise FloatingPointError(f"the batch loss at the current parameters is not finite ({f})")
            return math.inf  # a trial step too far: the line search backs off
        return f

    def _phi(self, t: float) -> tuple[float, float]:
        ops = self.ops
        self._last_t = t
        ops.copy("params", "trial")
        ops.axpy(t, "direction", "trial")
        f = self._eval("trial")
        return (f, ops.dot("acc", "direction")) if math.isfinite(f) else (f, math.nan)

    def _remember(self) -> None:
        """Store s = trial - params and y = acc - grad on the shards, if the curvature is positive."""
        ops = self.ops
        s, y = f"s{self._slot}", f"y{self._slot}"
        ops.copy("trial", s)
        ops.axpy(-1.0, "params", s)
        ops.copy("acc", y)
        ops.axpy(-1.0, "grad", y)
        sy = ops.dot(s, y)
        if sy <= 1e-10 * math.sqrt(max(ops.dot(s, s) * ops.dot(y, y), 0.0)):
            ops.drop(s)
            ops.drop(y)
            return
        if len(self.history) == self.memory:
            old = self.history.pop(0)
            ops.drop(old.s)
            ops.drop(old.y)
        self.history.append(HistoryPair(s, y, 1.0 / sy))
        self._slot = (self._slot + 1) % (self.memory + 1)

    def begin(self) -> Iteration:
        """Evaluate the starting point (iteration 0)."""
        self._start = self.clock()
        self._f = self._eval("params")
        self.ops.copy("acc", "grad")
        self._gnorm = math.sqrt(self.ops.dot("grad", "grad"))
        return self._record(0, self._f, self._gnorm, 0.0, 1)

    def iterate(self) -> Iteration | None:
        """One L-BFGS iteration; ``None`` (and ``stop_reason``) when a stopping rule holds."""
        ops = self.ops
        if not self.rows:
            raise RuntimeError("call begin() first")
        if self.done:
            return None
        k = len(self.rows)
        if self._gnorm <= self.gtol:
            self.stop_reason = f"gradient norm {self._gnorm:.3g} <= gtol {self.gtol}"
            return None
        if k > self.max_iterations:
            self.stop_reason = f"reached {self.max_iterations} iterations"
            return None
        two_loop(ops, self.history)
        d0 = ops.dot("grad", "direction")
        if not d0 < 0:  # the history went bad: restart from steepest descent
            for pair in self.history:
                ops.drop(pair.s)
                ops.drop(pair.y)
            self.history.clear()
            two_loop(ops, self.history)
            d0 = ops.dot("grad", "direction")
        t0 = 1.0 if self.history else min(1.0, 1.0 / max(self._gnorm, 1e-12))
        result = wolfe_search(self._phi, self._f, d0, t0, self.c1, self.c2)
        if result.t == 0.0:
            self.stop_reason = "line search found no decrease"
            return None
        if result.t != self._last_t:  # the accepted point was not the last one evaluated
            self._phi(result.t)
        self._remember()
        ops.copy("trial", "params")
        ops.copy("acc", "grad")
        f_old, self._f = self._f, result.f
        self._gnorm = math.sqrt(ops.dot("grad", "grad"))
        row = self._record(k, self._f, self._gnorm, result.t, result.evaluations)
        if f_old - self._f <= self.ftol * max(abs(self._f), abs(f_old), 1.0):
            self.stop_reason = f"loss change {f_old - self._f:.3g} below ftol"
        elif k >= self.max_iterations:
            self.stop_reason = f"reached {self.max_iterations} iterations"
        return row

    def run(self) -> list[Iteration]:
        """Iterate until a stopping rule holds; returns one row per iteration."""
        self.begin()
        while self.iterate() is not None:
            pass
        return self.rows

    def _record(self, k: int, f: float, gnorm: float, t: float, evals: int) -> Iteration:
        row = Iteration(k, round(self.clock() - self._start, 4), f, gnorm, t, evals)
        self.rows.append(row)
        return row
