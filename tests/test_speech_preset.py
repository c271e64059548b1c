"""The ``speech`` preset (the paper's four sigmoid hidden layers) learns on its dataset: its hidden layers start
at Glorot and Bengio's 4x weights for the logistic sigmoid, so that its first layer gets a gradient worth
following (at 1x, 3,000 Adagrad steps left it at chance: issue #46)."""

import numpy as np
import pytest

from dbkit import data, nn
from dbkit.nn import Dense, Network, Sigmoid


def _first_to_last_gradient(network: Network, X: np.ndarray, y: np.ndarray) -> float:
    """The RMS of the first layer's weight gradient over the output layer's, at the network's initial weights."""
    _, g = network.loss_and_grad(network.init_params(0).astype(np.float32), X, y)
    weights = [s for s in network.specs if s.name.endswith("W")]
    rms = [float(np.sqrt(np.mean(g[s.start:s.stop] ** 2))) for s in (weights[0], weights[-1])]
    return rms[0] / rms[1]


@pytest.fixture(scope="module")
def speech():
    return data.speech(small=True)  # (3,000 training and 600 test examples)


def test_its_first_layer_gets_several_times_the_gradient_that_glorot_s_plain_weights_give(speech):
    preset = nn.build("speech", 440, 64)
    sizes = [440, 512, 512, 512, 512]
    plain = Network([layer for a, b in zip(sizes, sizes[1:]) for layer in (Dense(a, b), Sigmoid(b))] + [Dense(512, 64)])
    X, y = speech.X_train[:256], speech.y_train[:256]
    assert _first_to_last_gradient(preset, X, y) > 5 * _first_to_last_gradient(plain, X, y)


def test_it_learns_on_its_dataset_well_above_chance(speech):
    network = nn.build("speech", 440, 64)
    p = network.init_params(0).astype(np.float32)
    squares, rng = np.zeros_like(p), np.random.default_rng(0)
    for _ in range(600):  # Adagrad, lr 0.01, batch 32 (docs/reference.md: what the presets reach)
        idx = rng.integers(0, len(speech.y_train), 32)
        _, g = network.loss_and_grad(p, speech.X_train[idx], speech.y_train[idx])
        squares += g * g
        p -= 0.01 * g / np.sqrt(squares + 1e-8)
    assert network.accuracy(p, speech.X_test, speech.y_test) > 4 / 64  # (chance: 1/64; seen: 0.092)


def test_a_dense_layer_refuses_a_gain_that_is_not_positive():
    for gain in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="gain"):
            Dense(3, 4, gain=gain)
