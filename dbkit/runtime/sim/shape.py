"""A network's shape for the cost model: per layer its kind, sizes, parameters and arithmetic.

``ModelShape.of(network)`` reads a dbkit ``Network``; ``ModelShape.named(name)``
gives the paper-shaped models that only cost-only mode can hold (DistBelief
Sec. 5): the 42M-parameter speech model and locally connected image models of
about 80M, 330M and 1.7B parameters. No arrays are made, so a model of
billions of parameters is a few numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...nn import Dense, Layer, LocallyConnected, LocallyConnected1D, LocallyConnected2D, Network


@dataclass(frozen=True)
class LayerShape:
    """One layer. ``flops`` is the forward pass's floating-point operations per example (a
    multiply-add counts 2); ``in_shape``/``out_shape`` are ``(rows, cols, channels)`` for spatial
    layers (a 1-D layer has ``cols = 1``)."""

    kind: str  # dense, local, pool, elementwise
    in_size: int
    out_size: int
    params: int
    flops: int
    in_shape: tuple[int, int, int] = (0, 0, 0)
    out_shape: tuple[int, int, int] = (0, 0, 0)
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)

    @property
    def spatial(self) -> bool:
        return self.kind in ("local", "pool")

    @property
    def has_params(self) -> bool:
        return self.kind in ("dense", "local")

    def working_set_bytes(self, share: float = 1.0, batch: int = 32) -> float:
        """Bytes the arithmetic of ``share`` of this layer's units touches for ``batch`` examples (0 for a
        layer without parameters): its weights, its outputs, and its inputs: all of them for a fully connected
        layer, each output position's receptive field (the patches a locally connected layer multiplies) for
        a locally connected one."""
        if self.kind == "dense":
            return 4.0 * (share * (self.params + batch * self.out_size) + batch * self.in_size)
        if self.kind == "local":
            return 4.0 * share * (self.params + batch * self.out_size) + self.patch_bytes(share, batch)
        return 0.0

    def patch_bytes(self, share: float = 1.0, batch: int = 32) -> float:
        """Bytes of ``share`` of a locally connected layer's patches for ``batch`` examples: each output
        position's receptive field, gathered (0 for other layers). dbkit's layer (``dbkit.nn.local``) makes an
        array of this size anew in each forward pass, and two more in each backward pass that computes the
        input's gradient (the patches' gradient, and its columns for the scatter back to the inputs)."""
        if self.kind != "local":
            return 0.0
        return 4.0 * share * batch * self.flops / (2 * self.out_shape[2])


def dense(n_in: int, n_out: int) -> LayerShape:
    return LayerShape("dense", n_in, n_out, n_in * n_out + n_out, 2 * n_in * n_out)


def local(in_shape: tuple[int, int, int], kernel: tuple[int, int], stride: tuple[int, int], filters: int
          ) -> LayerShape:
    """A locally connected layer: unshared ``kernel`` receptive fields (over all input channels)."""
    h, w, c = in_shape
    oh, ow = (h - kernel[0]) // stride[0] + 1, (w - kernel[1]) // stride[1] + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"kernel {kernel} is larger than the input {in_shape}")
    field = kernel[0] * kernel[1] * c
    positions = oh * ow
    return LayerShape("local", h * w * c, positions * filters, positions * filters * (field + 1),
                      2 * positions * filters * field, in_shape, (oh, ow, filters), kernel, stride)


def pool(in_shape: tuple[int, int, int], size: int) -> LayerShape:
    """Pooling over ``size x size`` windows of each channel (no parameters, tiles stay aligned)."""
    h, w, c = in_shape
    out = (h // size, w // size, c)
    return LayerShape("pool", h * w * c, out[0] * out[1] * c, 0, h * w * c, in_shape, out, (size, size),
                      (size, size))


def elementwise(n: int) -> LayerShape:
    return LayerShape("elementwise", n, n, 0, n)


@dataclass(frozen=True)
class ModelShape:
    """A model as the cost model sees it."""

    name: str
    layers: tuple[LayerShape, ...]

    @property
    def parameters(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def key(self) -> str:
        """Its name and size: how a profile's measured gradient times are looked up."""
        return f"{self.name}:{self.parameters}"

    @property
    def classes(self) -> int:
        return self.layers[-1].out_size

    def gradient_flops(self) -> tuple[float, float, float]:
        """Per example, a forward and backward pass: ``(dense flops, local flops, elementwise units)``.
        Backward costs twice the forward (the parameter gradient and the input gradient), except
        that the first layer computes no input gradient."""
        dense_f = local_f = units = 0.0
        for i, layer in enumerate(self.layers):
            passes = 2.0 if i == 0 else 3.0
            if layer.kind == "dense":
                dense_f += passes * layer.flops
            elif layer.kind == "local":
                local_f += passes * layer.flops
            else:
                units += 2.0 * layer.flops
        units += 3.0 * self.classes  # the softmax and its gradient
        return dense_f, local_f, units

    @classmethod
    def of(cls, network: Network) -> ModelShape:
        """The shape of a dbkit network."""
        shape = cls(network.name, tuple(layer_shape(layer) for layer in network.layers))
        if shape.parameters != network.size:
            raise AssertionError(f"shape of {network.name}: {shape.parameters} parameters, network {network.size}")
        return shape

    @classmethod
    def named(cls, name: str) -> ModelShape:
        """A paper-shaped model by name (``NAMED_SHAPES``)."""
        try:
            return NAMED_SHAPES[name]()
        except KeyError:
            raise ValueError(f"unknown model shape {name!r}; choose one of {', '.join(NAMED_SHAPES)}") from None


def layer_shape(layer: Layer) -> LayerShape:
    """The shape of one dbkit layer (a whole one, or a partition's part of one)."""
    if isinstance(layer, Dense):
        return dense(layer.in_size, layer.out_size)
    if isinstance(layer, LocallyConnected2D):
        return local(layer.in_shape, (layer.kernel, layer.kernel), (layer.stride, layer.stride), layer.filters)
    if isinstance(layer, LocallyConnected1D):
        (n, c), k, s = layer.in_shape, layer.kernel, layer.stride
        return local((n, 1, c), (k, 1), (s, 1), layer.filters)
    if isinstance(layer, LocallyConnected):
        params = layer.positions * layer.filters * (layer.field + 1)
        flops = 2 * layer.positions * layer.field * layer.filters
        return LayerShape("local", layer.in_size, layer.out_size, params, flops)
    return elementwise(layer.out_size)


def speech_42m() -> ModelShape:
    """The paper's speech model (Sec. 5): 11 x 40 log-energies in, four fully connected sigmoid layers
    of 2560 units, a softmax of 8192 acoustic states; about 42M parameters."""
    layers: list[LayerShape] = []
    for a, b in zip([440, 2560, 2560, 2560], [2560, 2560, 2560, 2560]):
        layers += [dense(a, b), elementwise(b)]
    return ModelShape("speech-42m", tuple(layers + [dense(2560, 8192)]))


def image_model(name: str, filters: int, pool_after: tuple[bool, bool], final_pool: bool,
                classes: int = 21_000) -> ModelShape:
    """Shaped like the paper's image models (Sec. 5): 100 x 100 x 3 images, three stages of locally
    connected 10 x 10 receptive fields with ``filters`` units per position (the paper varied 8 to 36),
    pooling, and 21k one-vs-all output units over the last stage. The paper gives their parameter
    counts, not their layer sizes: ``filters`` and where to pool are chosen to match the counts
    (within 1%)."""
    layers: list[LayerShape] = []
    shape = (100, 100, 3)
    for stage in range(3):
        lc = local(shape, (10, 10), (1, 1), filters)
        layers += [lc, elementwise(lc.out_size)]
        shape = lc.out_shape
        if stage < 2 and pool_after[stage]:
            p = pool(shape, 2)
            layers.append(p)
            shape = p.out_shape
    if final_pool:
        p = pool(shape, 2)
        layers.append(p)
        shape = p.out_shape
    layers.append(dense(shape[0] * shape[1] * shape[2], classes))
    return ModelShape(name, tuple(layers))


NAMED_SHAPES = {
    "speech-42m": speech_42m,
    "image-80m": lambda: image_model("image-80m", 16, (True, True), True),
    "image-330m": lambda: image_model("image-330m", 36, (True, True), False),
    "image-1.7b": lambda: image_model("image-1.7b", 34, (False, True), False),
}
