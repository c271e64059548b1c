"""A line search satisfying the strong Wolfe conditions.

Nocedal & Wright, *Numerical Optimization* (2nd ed.), Algorithms 3.5 (bracketing)
and 3.6 (zoom), with cubic interpolation safeguarded by bisection. Accepts a
step ``t`` with

    f(x + t d) <= f(x) + c1 t f'(x; d)        (sufficient decrease)
    |f'(x + t d; d)| <= c2 |f'(x; d)|         (curvature, strong form)

Each trial costs one full batch gradient in Sandblaster, so the search is
frugal: ``t = 1`` is tried first and usually accepted by L-BFGS.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class LineSearchResult:
    t: float
    f: float
    dphi: float
    evaluations: int
    wolfe: bool  # False: the best sufficient-decrease point found within the budget


def _cubic_min(a, fa, da, b, fb, db) -> float | None:
    d1 = da + db - 3 * (fa - fb) / (a - b)
    sq = d1 * d1 - da * db
    if sq < 0:
        return None
    d2 = math.copysign(math.sqrt(sq), b - a)
    t = b - (b - a) * (db + d2 - d1) / (db - da + 2 * d2)
    return t if math.isfinite(t) else None


def wolfe_search(phi: Callable[[float], tuple[float, float]], f0: float, d0: float, t0: float = 1.0,
                 c1: float = 1e-4, c2: float = 0.9, max_evals: int = 20, t_max: float = 1e6) -> LineSearchResult:
    """Find ``t`` along a descent direction; ``phi(t)`` returns ``(f(x + t d), f'(x + t d; d))``.

    Raises ``ValueError`` unless ``d0 < 0`` (a descent direction).
    """
    if not d0 < 0:
        raise ValueError(f"not a descent direction: directional derivative {d0}")
    evals = 0
    best = None
    t_prev, f_prev, d_prev = 0.0, f0, d0
    t = t0
    while evals < max_evals:
        f, d = phi(t)
        evals += 1
        if f <= f0 + c1 * t * d0 and (best is None or f < best[1]):
            best = (t, f, d)
        if f > f0 + c1 * t * d0 or (evals > 1 and f >= f_prev):
            return _zoom(phi, f0, d0, t_prev, f_prev, d_prev, t, f, d, c1, c2, evals, max_evals, best)
        if abs(d) <= -c2 * d0:
            return LineSearchResult(t, f, d, evals, True)
        if d >= 0:
            return _zoom(phi, f0, d0, t, f, d, t_prev, f_prev, d_prev, c1, c2, evals, max_evals, best)
        t_prev, f_prev, d_prev = t, f, d
        t = min(2.0 * t, t_max)
    return _fallback(best, evals)


def _zoom(phi, f0, d0, lo, flo, dlo, hi, fhi, dhi, c1, c2, evals, max_evals, best) -> LineSearchResult:
    while evals < max_evals:
        t = _cubic_min(lo, flo, dlo, hi, fhi, dhi)
        width = abs(hi - lo)
        if t is None or not (min(lo, hi) + 0.1 * width <= t <= max(lo, hi) - 0.1 * width):
            t = 0.5 * (lo + hi)  # bisection when interpolation is unsafe
        f, d = phi(t)
        evals += 1
        if f <= f0 + c1 * t * d0 and (best is None or f < best[1]):
            best = (t, f, d)
        if f > f0 + c1 * t * d0 or f >= flo:
            hi, fhi, dhi = t, f, d
        else:
            if abs(d) <= -c2 * d0:
                return LineSearchResult(t, f, d, evals, True)
            if d * (hi - lo) >= 0:
                hi, fhi, dhi = lo, flo, dlo
            lo, flo, dlo = t, f, d
        if abs(hi - lo) < 1e-12 * max(1.0, abs(lo)):
            break
    return _fallback(best, evals)


def _fallback(best, evals: int) -> LineSearchResult:
    if best is None:
        return LineSearchResult(0.0, math.nan, math.nan, evals, False)
    t, f, d = best
    return LineSearchResult(t, f, d, evals, False)
