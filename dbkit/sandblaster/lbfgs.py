"""L-BFGS's two-loop recursion built from shard commands, and a numpy reference.

Nocedal & Wright, *Numerical Optimization* (2nd ed.), Algorithm 7.4. In
Sandblaster (DistBelief Sec. 4.2) the vectors s_i, y_i, the gradient and the
direction all live on the parameter shards; the coordinator holds only the
scalars rho_i = 1 / (y_i . s_i) and issues dot / axpy / scale / copy commands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class HistoryPair:
    """Names of one (s, y) pair on the shards and its scalar rho = 1 / (y . s)."""

    s: str
    y: str
    rho: float


def two_loop(ops, history: list[HistoryPair], grad: str = "grad", out: str = "direction") -> None:
    """Write the L-BFGS direction ``-H grad`` into vector ``out`` on the shards.

    ``ops`` has ``dot``, ``axpy``, ``scale`` and ``copy`` over named vectors
    (``dbkit.ps.ShardedParameters``). ``history`` is oldest first. The initial
    matrix is ``gamma * I`` with ``gamma = s.y / y.y`` of the newest pair.
    """
    ops.copy(grad, out)
    alphas = []
    for pair in reversed(history):
        alpha = pair.rho * ops.dot(pair.s, out)
        ops.axpy(-alpha, pair.y, out)
        alphas.append(alpha)
    if history:
        newest = history[-1]
        ops.scale((1.0 / newest.rho) / ops.dot(newest.y, newest.y), out)
    for pair, alpha in zip(history, reversed(alphas)):
        beta = pair.rho * ops.dot(pair.y, out)
        ops.axpy(alpha - beta, pair.s, out)
    ops.scale(-1.0, out)


def two_loop_numpy(g: np.ndarray, S: list[np.ndarray], Y: list[np.ndarray]) -> np.ndarray:
    """The same recursion on in-memory float64 vectors (oldest pair first): the reference."""
    q = np.array(g, dtype=np.float64)
    rhos = [1.0 / float(np.dot(y, s)) for s, y in zip(S, Y)]
    alphas = []
    for s, y, rho in reversed(list(zip(S, Y, rhos))):
        a = rho * float(np.dot(s, q))
        q -= a * y
        alphas.append(a)
    if S:
        q *= float(np.dot(S[-1], Y[-1])) / float(np.dot(Y[-1], Y[-1]))
    for s, y, rho, a in zip(S, Y, rhos, reversed(alphas)):
        b = rho * float(np.dot(y, q))
        q += (a - b) * s
    return -q
