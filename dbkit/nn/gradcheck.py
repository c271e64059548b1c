"""Gradient checks against central differences, in float64.

``check_layer`` checks one layer's input and parameter gradients through a
random linear read-out; ``check_network`` checks a whole network's
``loss_and_grad`` (including the L2 term). Both return the largest relative
error found, so a test can assert it is small.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .layer import Layer
from .network import Network


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest elementwise ``|a - b| / (|a| + |b|)``.

    The denominator is floored at 1e-3 of the vectors' largest magnitude, so
    entries that are nearly zero (deep sigmoid layers) are judged against the
    gradient's scale instead of against central differences' round-off.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if not a.size:
        return 0.0
    mag = np.abs(a) + np.abs(b)
    floor = max(1e-10, 1e-3 * float(mag.max()))
    return float(np.max(np.abs(a - b) / np.maximum(mag, floor)))


def numerical_gradient(
    f: Callable[[np.ndarray], float], x: np.ndarray, coords: np.ndarray, eps: float = 1e-6
) -> np.ndarray:
    """Central differences of ``f`` at ``x`` along the flat coordinates ``coords``."""
    x = x.copy()
    out = np.empty(len(coords))
    for j, i in enumerate(coords):
        old = x.flat[i]
        x.flat[i] = old + eps
        fp = f(x)
        x.flat[i] = old - eps
        fm = f(x)
        x.flat[i] = old
        out[j] = (fp - fm) / (2 * eps)
    return out


def _coords(size: int, max_coords: int | None, rng: np.random.Generator) -> np.ndarray:
    if max_coords is None or size <= max_coords:
        return np.arange(size)
    return np.sort(rng.choice(size, max_coords, replace=False))


def check_layer(layer: Layer, batch: int = 3, seed: int = 0, max_coords: int | None = 200) -> float:
    """Largest relative error of ``layer.backward`` against central differences.

    The scalar checked is ``sum(R * forward(x))`` for a fixed random ``R``.
    Inputs are shifted away from zero so ReLU's kink is not straddled.
    """
    rng = np.random.default_rng(seed)
    params = {k: v.astype(np.float64) + 0.1 * rng.standard_normal(v.shape) for k, v in layer.init(rng).items()}
    x = rng.standard_normal((batch, layer.in_size))
    x += np.sign(x) * 0.05
    R = rng.standard_normal((batch, layer.out_size))
    out, cache = layer.forward(params, x)
    dx, grads = layer.backward(params, cache, R)
    assert dx is not None
    worst = relative_error(dx.ravel()[c := _coords(x.size, max_coords, rng)],
                           numerical_gradient(lambda z: float((layer.forward(params, z)[0] * R).sum()), x, c))
    for key, value in params.items():
        c = _coords(value.size, max_coords, rng)

        def f(v, key=key):
            p = dict(params)
            p[key] = v
            return float((layer.forward(p, x)[0] * R).sum())

        worst = max(worst, relative_error(grads[key].ravel()[c], numerical_gradient(f, value, c)))
    return worst


def check_network(
    net: Network, X: np.ndarray, y: np.ndarray, seed: int = 0, max_coords: int | None = 300, eps: float = 1e-5
) -> float:
    """Largest relative error of ``net.loss_and_grad`` against central differences of step ``eps``.

    A whole network's loss carries more round-off than one layer's sum: on the speech preset (four sigmoid
    layers at 4x Glorot weights) the error went as 1/eps below 1e-5 (2.6e-4 at 1e-6, 3.1e-5 at 1e-5, 3.4e-6
    at 1e-4), so the step is 1e-5 here, where round-off and truncation are both small."""
    rng = np.random.default_rng(seed)
    params = net.init_params(seed).astype(np.float64)
    params += 0.05 * rng.standard_normal(net.size)
    X = np.asarray(X, dtype=np.float64)
    _, grad = net.loss_and_grad(params, X, y)
    c = _coords(net.size, max_coords, rng)
    return relative_error(grad[c], numerical_gradient(lambda p: net.loss(p, X, y), params, c, eps))
