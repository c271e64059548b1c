"""numpy networks: layers, flat parameter vector, forward/backward, gradient checks.

Imports numpy only: no dask, ipywidgets or matplotlib (DESIGN.md layering).
"""

from .activations import ACTIVATIONS, ReLU, Sigmoid, Tanh
from .dense import Dense
from .gradcheck import check_layer, check_network, relative_error
from .layer import Layer
from .local import LocallyConnected, LocallyConnected1D, LocallyConnected2D
from .loss import softmax_cross_entropy
from .network import Network, ParamSpec
from .presets import PRESETS, build

__all__ = [
    "ACTIVATIONS", "Dense", "Layer", "LocallyConnected", "LocallyConnected1D", "LocallyConnected2D",
    "Network", "ParamSpec", "PRESETS", "ReLU", "Sigmoid", "Tanh", "build", "check_layer",
    "check_network", "relative_error", "softmax_cross_entropy",
]
