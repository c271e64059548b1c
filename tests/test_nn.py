"""Every layer and preset against central differences; the flat vector and its views."""

import numpy as np
import pytest

from dbkit import nn
from dbkit.nn import check_layer, check_network

LAYERS = [
    nn.Dense(7, 5),
    nn.ReLU(9),
    nn.Sigmoid(9),
    nn.Tanh(9),
    nn.LocallyConnected1D(length=9, channels=2, kernel=3, filters=4),
    nn.LocallyConnected1D(length=10, channels=1, kernel=4, filters=2, stride=3),
    nn.LocallyConnected2D(height=6, width=5, channels=2, kernel=3, filters=3),
    nn.LocallyConnected2D(height=7, width=7, channels=1, kernel=3, filters=2, stride=2),
]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda l: l.describe())
def test_layer_gradients_match_central_differences(layer):
    assert check_layer(layer, seed=1) < 1e-6


@pytest.mark.parametrize(
    "name,n_features,n_classes,hidden",
    [("linear", 12, 4, None), ("mlp", 12, 4, (9, 7)), ("speech", 440, 16, (24, 16, 16, 12)),
     ("speech", 440, 64, None), ("image-local", 64, 10, None)],
)
def test_preset_gradients_match_central_differences(name, n_features, n_classes, hidden):
    net = nn.build(name, n_features, n_classes, hidden=hidden, l2=0.01)
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((6, n_features)), rng.integers(0, n_classes, 6)
    assert check_network(net, X, y, max_coords=250) < 1e-4


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_is_scipy_s_logistic_function_without_overflow(dtype):
    from scipy.special import expit

    x = np.concatenate([np.linspace(-60, 60, 4000), [-1e4, -745.0, 0.0, 745.0, 1e4, 1.0]]).astype(dtype).reshape(2, -1)
    with np.errstate(all="raise"):
        out, _ = nn.Sigmoid(x.shape[1]).forward({}, x)
    eps = np.finfo(dtype).eps
    assert out.dtype == dtype
    np.testing.assert_allclose(out, expit(x), rtol=0, atol=2 * eps)
    assert (out >= 0).all() and (out <= 1).all()
    assert np.all(np.diff(out.ravel()[:4000]) >= 0)  # monotone


def test_gradcheck_detects_a_wrong_gradient():
    class BrokenDense(nn.Dense):
        def backward(self, params, cache, dout):
            dx, grads = super().backward(params, cache, dout)
            grads["W"] = grads["W"] * 1.01
            return dx, grads

    assert check_layer(BrokenDense(4, 3)) > 1e-3


def test_locally_connected_units_see_only_their_receptive_field():
    layer = nn.LocallyConnected2D(height=6, width=6, channels=1, kernel=3, filters=1)
    params = {k: v.astype(float) for k, v in layer.init(np.random.default_rng(0)).items()}
    x = np.zeros((1, 36))
    x[0, 0] = 1.0  # the top-left pixel feeds only output position (0, 0)
    out, _ = layer.forward(params, x)
    base, _ = layer.forward(params, np.zeros((1, 36)))
    changed = np.flatnonzero(np.abs(out - base) > 0)
    assert set(changed) <= {0}
    # unshared weights: two positions with the same input pattern give different outputs
    x2 = np.ones((1, 36))
    out2, _ = layer.forward(params, x2)
    assert len(np.unique(np.round(out2, 6))) > 1


def test_flat_vector_views_and_l2_excludes_biases():
    net = nn.build("mlp", 5, 3, hidden=(4,), l2=0.5)
    assert net.size == 5 * 4 + 4 + 4 * 3 + 3
    p = net.init_params(0)
    assert p.dtype == np.float32
    views = net.views(p)
    views[0]["W"][0, 0] = 42.0  # a view, not a copy
    assert p[net.spec("0.W").start] == 42.0
    b = np.zeros(net.size, np.float32)
    b[net.spec("0.b").start] = 3.0
    assert net.penalty(b) == 0.0
    w = np.zeros(net.size, np.float32)
    w[net.spec("2.W").start] = 2.0
    assert net.penalty(w) == pytest.approx(0.5 * 0.5 * 4.0)


def test_seeded_initialisation_is_reproducible():
    a = nn.build("image-local", 64, 10).init_params(7)
    b = nn.build("image-local", 64, 10).init_params(7)
    c = nn.build("image-local", 64, 10).init_params(8)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_loss_matches_a_direct_formula():
    net = nn.build("linear", 3, 2, l2=0.2)
    p = net.init_params(1).astype(np.float64)
    X = np.array([[1.0, 2.0, -1.0], [0.5, -0.5, 0.0]])
    y = np.array([1, 0])
    W = p[:6].reshape(3, 2)
    logits = X @ W + p[6:]
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    expected = -np.mean(np.log(probs[[0, 1], y])) + 0.1 * np.sum(W**2)
    assert net.loss(p, X, y) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", [
    lambda: nn.build("nope", 4, 2),
    lambda: nn.build("speech", 64, 10),
    lambda: nn.build("image-local", 10, 3),
    lambda: nn.build("mlp", 4, 2, hidden=(0,)),
    lambda: nn.Network([nn.Dense(3, 4), nn.Dense(5, 2)]),
    lambda: nn.LocallyConnected2D(2, 2, 1, kernel=3, filters=1),
])
def test_bad_model_settings_raise_clear_errors(bad):
    with pytest.raises(ValueError):
        bad()


def test_signal_local_preset_is_locally_connected_and_its_gradient_checks():
    net = nn.build("signal-local", 40, 10, l2=1e-3, filters=4)
    kinds = [layer.kind for layer in net.layers if hasattr(layer, "kind")]
    assert kinds.count("local1d") == 2 and net.layers[-1].out_size == 10
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((6, 40)).astype(np.float32), rng.integers(0, 10, 6)
    assert check_network(net, X, y) < 1e-3  # central differences


@pytest.mark.parametrize("name,n_features,n_classes,hidden,l2,image", [
    ("mlp", 64, 10, None, 1e-4, None), ("speech", 440, 12, (16, 8), 0.0, None), ("linear", 30, 5, None, 1e-3, None),
    ("signal-local", 40, 10, None, 1e-4, None), ("image-local", 64, 10, None, 0.0, (8, 8, 1))])
def test_a_stack_of_replicas_gradients_is_each_replica_s_own_bit_for_bit(name, n_features, n_classes, hidden, l2,
                                                                         image):
    """The simulator computes gradients due together as one stack; each row must be exactly the gradient
    one replica computes alone (the reference), with and without the L2 term."""
    net = nn.build(name, n_features, n_classes, hidden=hidden, l2=l2, image_shape=image)
    assert net.stackable
    rng = np.random.default_rng(3)
    R, B = 5, 11
    P = np.stack([net.init_params(i) for i in range(R)]) + rng.standard_normal((R, net.size)).astype(np.float32) * 0.1
    X, y = rng.standard_normal((R, B, n_features)).astype(np.float32), rng.integers(0, n_classes, (R, B))
    for with_penalty in (True, False):
        losses, grads = net.loss_and_grad_stacked(P, X, y, with_penalty)
        for r in range(R):
            loss, grad = net.loss_and_grad(P[r], X[r], y[r], with_penalty)
            assert losses[r] == loss and np.array_equal(grads[r], grad)
    assert not np.array_equal(grads[0], grads[1])  # the rows are different replicas' gradients


def test_a_network_with_a_layer_that_cannot_stack_says_so():
    net = nn.build("mlp", 40, 10)
    net.layers[0].stacks = False  # (an instance's own flag: a layer of a researcher's that computes one batch)
    assert not net.stackable
    with pytest.raises(ValueError, match="one batch at a time"):
        net.loss_and_grad_stacked(np.zeros((2, net.size), np.float32), np.zeros((2, 3, 40), np.float32),
                                  np.zeros((2, 3), int))


def test_loss_and_logits_are_loss_and_forward_in_one_pass():
    """An evaluation's test loss and accuracy from one forward pass: the same numbers, bit for bit, as ``loss``
    and ``forward`` called apart (the simulated grid's reports rest on it), with the penalty included."""
    rng = np.random.default_rng(4)
    net = nn.build("mlp", 12, 5, hidden=[16], l2=1e-3)
    params = net.init_params(2)
    X, y = rng.normal(size=(40, 12)).astype(np.float32), rng.integers(0, 5, 40)
    loss, logits = net.loss_and_logits(params, X, y)
    assert loss == net.loss(params, X, y) and loss != net.loss(params, X, (y + 1) % 5)
    np.testing.assert_array_equal(logits, net.forward(params, X))
