"""The synchronous SGD baseline: accuracy, exactness through shards, and bad input."""

import numpy as np
import pytest

from dbkit import data, nn
from dbkit.algorithms import SyncSGD, TrainingDiverged
from dbkit.config import RunConfig
from dbkit.ps import local_shards


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def _sgd(ds, **changes):
    cfg = RunConfig(**{"steps": 200, "eval_every": 50, **changes})
    net = nn.build(cfg.model, ds.n_features, ds.n_classes, hidden=cfg.hidden, l2=cfg.l2)
    return net, cfg


def test_sgd_matches_a_hand_written_numpy_loop(digits):
    net, cfg = _sgd(digits, steps=30, lr=0.1)
    algo = SyncSGD(net, digits, cfg)
    algo.fit()
    # independent reference: the textbook loop over the same batches
    p = net.init_params(cfg.seed)
    batches = data.MiniBatches(digits.X_train, digits.y_train, cfg.batch_size, seed=cfg.seed)
    for _ in range(30):
        X, y = next(batches)
        _, g = net.loss_and_grad(p, X, y)
        p = p - np.float32(0.1) * g
    assert np.allclose(algo.params, p, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_through_shards_is_bit_identical_to_in_memory(digits, optimizer):
    net, cfg = _sgd(digits, steps=40, optimizer=optimizer)
    plain = SyncSGD(net, digits, cfg)
    plain.fit()
    server = local_shards(net.init_params(cfg.seed), 3, optimizer, cfg.lr)
    sharded = SyncSGD(net, digits, cfg, server=server)
    sharded.fit()
    assert plain.params.tobytes() == server.fetch().tobytes()
    assert sharded.summary()["replicas"][0]["pushes"] == 40


def test_history_and_loss_go_down(digits):
    net, cfg = _sgd(digits, steps=300, eval_every=100)
    algo = SyncSGD(net, digits, cfg)
    hist = algo.fit()
    assert [r["step"] for r in hist] == [0, 100, 200, 300]
    assert hist[-1]["train_loss"] < 0.5 * hist[0]["train_loss"]
    assert all(k in hist[-1] for k in ("t", "step", "train_loss", "test_accuracy"))


def test_seconds_budget_stops_training(digits):
    net, cfg = _sgd(digits)
    algo = SyncSGD(net, digits, cfg)
    algo.fit(seconds=0.3)
    assert algo.step_count > 0 and algo.history[-1]["step"] == algo.step_count


def test_divergence_is_reported_and_parameters_kept(digits):
    net, cfg = _sgd(digits, lr=100.0, model="mlp")
    algo = SyncSGD(net, digits, cfg)
    with pytest.raises(TrainingDiverged, match="Lower the learning rate") as e:
        for _ in range(5000):
            last = algo.params.copy()
            algo.step()
    assert np.isfinite(algo.params).all()
    assert np.array_equal(algo.params, last)
    assert "lr=100" in str(e.value)


@pytest.mark.parametrize("bad", [dict(lr=0), dict(lr=-1), dict(batch_size=0), dict(steps=0), dict(optimizer="adam"),
                                 dict(model="cnn"), dict(n_push=0), dict(replicas=0), dict(l2=-1), dict(seed=-3)])
def test_bad_settings_name_the_setting(bad):
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key if key != "model" else "model"):
        RunConfig(**bad)
