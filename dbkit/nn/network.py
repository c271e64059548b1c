"""A sequential network whose parameters are ONE flat float32 vector.

DistBelief's parameter server (Sec. 4) shards the model's parameters; keeping
them in one flat vector with named per-layer views makes a shard nothing more
than a contiguous range ``[start, stop)`` of that vector.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from .layer import Layer, Params
from .loss import softmax_cross_entropy


@dataclass(frozen=True)
class ParamSpec:
    """Where one named parameter lives in the flat vector."""

    name: str
    layer: int
    key: str
    start: int
    stop: int
    shape: tuple[int, ...]

    @property
    def is_weight(self) -> bool:
        return self.key == "W"


class Network:
    """A stack of layers with a flat parameter vector.

    Parameters
    ----------
    layers : list of Layer
        Consecutive sizes must match; the last layer outputs class logits.
    l2 : float
        Weight of the ``(l2 / 2) * ||W||^2`` penalty on weights (not biases).
    name : str
        Preset name, for reports.
    """

    def __init__(self, layers: list[Layer], l2: float = 0.0, name: str = "custom") -> None:
        if not layers:
            raise ValueError("a network needs at least one layer")
        for a, b in zip(layers, layers[1:]):
            if a.out_size != b.in_size:
                raise ValueError(f"layer sizes do not chain: {a.describe()} then {b.describe()}")
        if not np.isfinite(l2) or l2 < 0:
            raise ValueError(f"l2 must be a finite number >= 0, got {l2}")
        self.layers = list(layers)
        self.l2 = float(l2)
        self.name = name
        self.specs: list[ParamSpec] = []
        offset = 0
        for i, layer in enumerate(self.layers):
            for key, shape in layer.param_shapes().items():
                n = int(np.prod(shape))
                self.specs.append(ParamSpec(f"{i}.{key}", i, key, offset, offset + n, tuple(shape)))
                offset += n
        self.size = offset
        self._by_name = {s.name: s for s in self.specs}
        # where the weights (not biases) sit: the L2 term's domain, as contiguous slices
        self.weight_slices = [slice(s.start, s.stop) for s in self.specs if s.is_weight]

    @property
    def in_size(self) -> int:
        return self.layers[0].in_size

    @property
    def n_classes(self) -> int:
        return self.layers[-1].out_size

    def init_params(self, seed: int = 0) -> np.ndarray:
        """Seeded initial parameters as one float32 vector."""
        rng = np.random.default_rng(seed)
        flat = np.zeros(self.size, dtype=np.float32)
        for i, layer in enumerate(self.layers):
            for key, value in layer.init(rng).items():
                spec = self.spec(f"{i}.{key}")
                flat[spec.start : spec.stop] = np.asarray(value).ravel()
        return flat

    def spec(self, name: str) -> ParamSpec:
        if name in self._by_name:
            return self._by_name[name]
        raise KeyError(f"no parameter named {name!r}; have {[s.name for s in self.specs]}")

    def views(self, params: np.ndarray) -> list[Params]:
        """Per-layer dicts of named views (no copies) into ``params``."""
        self._check(params)
        out: list[Params] = [{} for _ in self.layers]
        for s in self.specs:
            out[s.layer][s.key] = params[s.start : s.stop].reshape(s.shape)
        return out

    def _check(self, params: np.ndarray) -> None:
        if params.ndim != 1 or params.shape[0] != self.size:
            raise ValueError(f"expected a flat parameter vector of length {self.size}, got shape {params.shape}")

    def forward(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        """Class logits for a batch ``X`` of shape ``(batch, in_size)``."""
        h = np.asarray(X, dtype=params.dtype)
        for layer, p in zip(self.layers, self.views(params)):
            h, _ = layer.forward(p, h)
        return h

    def penalty(self, params: np.ndarray) -> float:
        """``(l2 / 2) * ||W||^2`` over the weights (contiguous slices: no temporary copies)."""
        if not self.l2:
            return 0.0
        return 0.5 * self.l2 * float(sum(np.dot(params[s], params[s]) for s in self.weight_slices))

    def loss(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        """Mean softmax cross-entropy plus the L2 penalty."""
        loss, _ = softmax_cross_entropy(self.forward(params, X), y)
        return loss + self.penalty(params)

    def loss_and_logits(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """``loss`` and the logits it is computed from, in one forward pass (an evaluation wants both: the
        test loss and the test accuracy)."""
        logits = self.forward(params, X)
        loss, _ = softmax_cross_entropy(logits, y)
        return loss + self.penalty(params), logits

    def penalty_grad(self, params: np.ndarray) -> np.ndarray:
        """Gradient of ``penalty``: ``l2 * W`` on weights, zero on biases."""
        grad = np.zeros_like(params)
        if self.l2:
            for s in self.weight_slices:
                np.multiply(params[s], self.l2, out=grad[s])
        return grad

    def loss_and_grad(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      with_penalty: bool = True) -> tuple[float, np.ndarray]:
        """Loss and its gradient, a flat vector of ``params``' dtype.

        Computation happens in ``params.dtype``: float32 for training, float64
        for gradient checks. ``with_penalty=False`` leaves out the L2 term (a
        Sandblaster work unit adds it once per batch, not once per unit).
        """
        loss, grad = self._backprop(params, self.views(params), X, y, with_penalty)
        return (loss + self.penalty(params) if with_penalty else loss), grad

    @property
    def stackable(self) -> bool:
        """Every layer also computes on a stack of batches, so ``loss_and_grad_stacked`` can be used."""
        return all(layer.stacks for layer in self.layers)

    def loss_and_grad_stacked(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                              with_penalty: bool = True) -> tuple[list[float], np.ndarray]:
        """``loss_and_grad`` of R replicas at once: ``params`` (R, size), ``X`` (R, batch, in_size), ``y``
        (R, batch). The same arithmetic as R calls, each matrix product of the stack on its own, so each
        row's loss and gradient are those of ``loss_and_grad`` bit for bit (``tests/test_nn.py`` checks);
        Python's per-call cost is paid once for the stack. The simulator uses it for replicas whose
        gradients are due in the same stretch of virtual time."""
        if not self.stackable:
            raise ValueError(f"{self.name}: layers {[layer.kind for layer in self.layers if not layer.stacks]} "
                             "compute on one batch at a time")
        if params.ndim != 2 or params.shape[1] != self.size or X.ndim != 3 or len(X) != len(params):
            raise ValueError(f"expected params (R, {self.size}) and X (R, batch, {self.in_size}), got "
                             f"{params.shape} and {X.shape}")
        R = params.shape[0]
        views: list[Params] = [{} for _ in self.layers]
        for s in self.specs:  # a bias gets an axis for the batch, to broadcast over the stack's examples
            views[s.layer][s.key] = params[:, s.start : s.stop].reshape((R,) + (s.shape if len(s.shape) > 1
                                                                                 else (1,) + s.shape))
        losses, grad = self._backprop(params, views, X, y, with_penalty)
        if with_penalty:
            return [float(loss) + self.penalty(p) for loss, p in zip(losses, params)], grad
        return [float(loss) for loss in losses], grad

    def _backprop(self, params: np.ndarray, views: list[Params], X: np.ndarray, y: np.ndarray,
                  with_penalty: bool) -> tuple:
        """The forward and backward passes: the mean cross-entropy (one, or one per row of a stack) and the
        gradient, with the L2 term's part on the weights unless ``with_penalty`` is false."""
        h = np.asarray(X, dtype=params.dtype)
        caches = []
        for layer, p in zip(self.layers, views):
            h, cache = layer.forward(p, h)
            caches.append(cache)
        d: np.ndarray | None
        loss, d = softmax_cross_entropy(h, y)
        grad = np.empty_like(params)  # every entry is written below
        lead = params.shape[:-1]  # () for one replica, (R,) for a stack
        for i in range(len(self.layers) - 1, -1, -1):
            assert d is not None  # only the first layer (i = 0) returns no input gradient
            d, grads = self.layers[i].backward(views[i], caches[i], d, need_dx=i > 0)
            for key, g in grads.items():
                s = self.spec(f"{i}.{key}")
                out = grad[..., s.start : s.stop]
                g = g.reshape(lead + (-1,))
                if self.l2 and s.is_weight and with_penalty:
                    np.multiply(params[..., s.start : s.stop], self.l2, out=out)
                    out += g
                else:
                    out[...] = g
        return loss, grad

    def predict(self, params: np.ndarray, X: np.ndarray) -> np.ndarray:
        return self.forward(params, X).argmax(axis=1)

    def accuracy(self, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
        return float((self.predict(params, X) == y).mean())

    def fingerprint(self) -> str:
        """A short hash of the architecture: each layer and every parameter's name, place and shape.

        Two networks with the same fingerprint read a flat parameter vector the
        same way, so a checkpoint of one can be loaded into the other.
        """
        arch = [layer.describe() for layer in self.layers] + [[s.name, s.start, s.stop, list(s.shape)]
                                                               for s in self.specs]
        return hashlib.sha256(json.dumps(arch).encode()).hexdigest()[:16]

    def describe(self) -> str:
        rows = [f"{self.name}: {self.size:,} parameters, l2={self.l2}"]
        rows += [f"  {i}: {layer.describe()}" for i, layer in enumerate(self.layers)]
        return "\n".join(rows)
