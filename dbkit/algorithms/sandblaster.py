"""Sandblaster L-BFGS's coordinator (DistBelief Sec. 4.2), independent of where it runs.

The coordinator drives L-BFGS with commands to the parameter shards (dot,
axpy, scale, copy) and receives only scalars; it never holds a full-length
vector. Batch gradients come from an *executor*: ``evaluate(name)`` returns the
batch loss at shard vector ``name`` and leaves the gradient in shard vector
``"acc"`` (in process: ``LocalBatch``; on Dask: work units handed to replicas).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .lbfgs import HistoryPair, two_loop
from .line_search import wolfe_search


class LBFGSCoordinator:
    """L-BFGS over sharded vectors.

    Parameters
    ----------
    ops : ShardedParameters-like
        ``dot``, ``axpy``, ``scale``, ``copy``, ``drop`` over named vectors.
    evaluate : callable
        ``evaluate(name) -> loss`` with the gradient left in vector ``"acc"``.
    memory : int
        History pairs kept (m); older pairs are dropped from the shards.
    gtol, ftol : float
        Stop when ``||g|| <= gtol`` or when the loss falls by less than
        ``ftol * max(|f|, 1)`` in an iteration (as scipy's L-BFGS-B ``factr``).
    """

    def __init__(self, ops, evaluate: Callable[[str], float], memory: int = 10, max_iterations: int = 100,
                 gtol: float = 1e-5, ftol: float = 1e-9, c1: float = 1e-4, c2: float = 0.9,
                 on_iteration: Callable[[dict], None] | None = None) -> None:
        if isinstance(memory, bool) or not isinstance(memory, int) or not 1 <= memory <= 1000:
            raise ValueError(f"memory must be a whole number in [1, 1000], got {memory!r}")
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 1:
            raise ValueError(f"max_iterations must be a whole number >= 1, got {max_iterations!r}")
        if not (gtol >= 0 and ftol >= 0):
            raise ValueError("gtol and ftol must be >= 0")
        self.ops, self.evaluate = ops, evaluate
        self.memory, self.max_iterations, self.gtol, self.ftol = memory, max_iterations, gtol, ftol
        self.c1, self.c2 = c1, c2
        self.on_iteration = on_iteration or (lambda row: None)
        self.history: list[HistoryPair] = []
        self.rows: list[dict] = []
        self.evaluations = 0
        self.stop_reason = ""
        self._slot = 0
        self._last_t = None

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

    def run(self) -> list[dict]:
        """Iterate until a stopping rule holds; returns one row per iteration."""
        ops = self.ops
        start = time.perf_counter()
        f = self._eval("params")
        ops.copy("acc", "grad")
        gnorm = math.sqrt(ops.dot("grad", "grad"))
        self._record(0, start, f, gnorm, 0.0, 1)
        for k in range(1, self.max_iterations + 1):
            if gnorm <= self.gtol:
                self.stop_reason = f"gradient norm {gnorm:.3g} <= gtol {self.gtol}"
                break
            two_loop(ops, self.history)
            d0 = ops.dot("grad", "direction")
            if not d0 < 0:  # the history went bad: restart from steepest descent
                for pair in self.history:
                    ops.drop(pair.s)
                    ops.drop(pair.y)
                self.history.clear()
                two_loop(ops, self.history)
                d0 = ops.dot("grad", "direction")
            t0 = 1.0 if self.history else min(1.0, 1.0 / max(gnorm, 1e-12))
            result = wolfe_search(self._phi, f, d0, t0, self.c1, self.c2)
            if result.t == 0.0:
                self.stop_reason = "line search found no decrease"
                break
            if result.t != self._last_t:  # the accepted point was not the last one evaluated
                self._phi(result.t)
            self._remember()
            ops.copy("trial", "params")
            ops.copy("acc", "grad")
            f_old, f = f, result.f
            gnorm = math.sqrt(ops.dot("grad", "grad"))
            self._record(k, start, f, gnorm, result.t, result.evaluations)
            if f_old - f <= self.ftol * max(abs(f), abs(f_old), 1.0):
                self.stop_reason = f"loss change {f_old - f:.3g} below ftol"
                break
        else:
            self.stop_reason = f"reached {self.max_iterations} iterations"
        return self.rows

    def _record(self, k: int, start: float, f: float, gnorm: float, t: float, evals: int) -> None:
        row = {"iteration": k, "t": round(time.perf_counter() - start, 4), "loss": f, "grad_norm": gnorm,
               "step": t, "evaluations": evals}
        self.rows.append(row)
        self.on_iteration(row)
