"""Model presets by name, the ``--model`` flag of the CLI.

- ``linear``: softmax regression (no hidden layer).
- ``mlp``: fully connected ReLU layers of widths ``hidden``.
- ``speech``: the paper's speech model (Sec. 5) scaled to one machine: input of
  11 frames x 40 log-energies = 440 units, four sigmoid hidden layers (the
  paper: 2560 units each, 8192 classes, 42M parameters; here ``hidden`` wide,
  default 4 x 512) and a softmax output. Pair it with ``--dataset speech``.
- ``image-local``: a small locally connected image model (two unshared 3x3
  locally connected layers with ReLU, then a softmax layer), after the paper's
  locally connected image networks; for 8x8 digits by default.
- ``signal-local``: the same idea in 1-D, for ``--dataset signals``: two
  unshared locally connected layers (kernel 5; the second with stride 2) with
  ReLU, then a softmax layer. Its locality lets it beat an MLP of similar size
  on shifted signals, and makes it cheap to partition.
"""

from __future__ import annotations

from collections.abc import Sequence

from .activations import ReLU, Sigmoid
from .dense import Dense
from .layer import Layer
from .local import LocallyConnected1D, LocallyConnected2D
from .network import Network

PRESETS = ("linear", "mlp", "speech", "image-local", "signal-local")
SPEECH_FRAMES, SPEECH_ENERGIES = 11, 40
SPEECH_INPUT = SPEECH_FRAMES * SPEECH_ENERGIES
#: the speech model's hidden layers start at 4x Glorot's weights (Glorot and Bengio, 2010, for the logistic
#: sigmoid): at 1x, four sigmoid layers pass back so little gradient that 3,000 Adagrad steps left the loss at
#: ln 64 (3.5% of 64 classes); at 4x the same steps reach 23% (docs/reference.md, "What the presets reach")
SIGMOID_GAIN = 4.0
DEFAULT_HIDDEN = {"mlp": (128,), "speech": (512, 512, 512, 512)}


def _fully_connected(sizes: Sequence[int], act, gain: float = 1.0) -> list[Layer]:
    """Dense layers of ``sizes`` with ``act`` between them; ``gain`` on the initial weights of each layer that
    feeds ``act``."""
    layers: list[Layer] = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [Dense(a, b, gain), act(b)]
    layers.append(Dense(sizes[-2], sizes[-1]))
    return layers


def _image_shape(n_features: int, image_shape: tuple[int, ...] | None) -> tuple[int, int, int]:
    if image_shape is not None:
        shape = tuple(image_shape) + (1,) * (3 - len(image_shape))
    else:
        side = int(round(n_features**0.5))
        if side * side != n_features:
            raise ValueError(
                f"model 'image-local' needs image-shaped inputs; {n_features} features is not a square "
                "and the dataset gives no image shape"
            )
        shape = (side, side, 1)
    h, w, c = shape
    if h * w * c != n_features:
        raise ValueError(f"image shape {shape} does not match {n_features} features")
    return h, w, c


def build(
    name: str,
    n_features: int,
    n_classes: int,
    hidden: Sequence[int] | None = None,
    l2: float = 0.0,
    image_shape: tuple[int, ...] | None = None,
    filters: int = 8,
) -> Network:
    """Build a preset network for data with ``n_features`` inputs and ``n_classes`` classes.

    Parameters
    ----------
    name : {'linear', 'mlp', 'speech', 'image-local', 'signal-local'}
    hidden : sequence of int, optional
        Hidden widths for ``mlp`` and ``speech``; ignored by the others.
    l2 : float
        L2 weight on the weights (DESIGN.md loss).
    image_shape : tuple, optional
        ``(height, width[, channels])`` for ``image-local``; a square input is inferred.
    filters : int
        Filters per position in the locally connected layers of ``image-local`` and ``signal-local``.
    """
    if n_features < 1 or n_classes < 2:
        raise ValueError(f"need n_features >= 1 and n_classes >= 2, got {n_features} and {n_classes}")
    if hidden is not None and any(int(h) < 1 for h in hidden):
        raise ValueError(f"hidden widths must be >= 1, got {list(hidden)}")
    layers: list[Layer]
    if name == "linear":
        layers = [Dense(n_features, n_classes)]
    elif name == "mlp":
        widths = tuple(hidden) if hidden else DEFAULT_HIDDEN["mlp"]
        layers = _fully_connected([n_features, *widths, n_classes], ReLU)
    elif name == "speech":
        if n_features != SPEECH_INPUT:
            raise ValueError(
                f"model 'speech' takes {SPEECH_FRAMES}x{SPEECH_ENERGIES} = {SPEECH_INPUT} input units, "
                f"the data has {n_features}; use --dataset speech"
            )
        widths = tuple(hidden) if hidden else DEFAULT_HIDDEN["speech"]
        layers = _fully_connected([n_features, *widths, n_classes], Sigmoid, SIGMOID_GAIN)
    elif name == "image-local":
        h, w, c = _image_shape(n_features, image_shape)
        l1 = LocallyConnected2D(h, w, c, kernel=3, filters=filters)
        l2_layer = LocallyConnected2D(*l1.out_shape, kernel=3, filters=filters)
        layers = [l1, ReLU(l1.out_size), l2_layer, ReLU(l2_layer.out_size), Dense(l2_layer.out_size, n_classes)]
    elif name == "signal-local":
        c1 = LocallyConnected1D(n_features, 1, kernel=5, filters=filters)
        c2 = LocallyConnected1D(c1.out_shape[0], filters, kernel=5, filters=filters, stride=2)
        layers = [c1, ReLU(c1.out_size), c2, ReLU(c2.out_size), Dense(c2.out_size, n_classes)]
    else:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(PRESETS)}")
    return Network(layers, l2=l2, name=name)
