"""The synchronous SGD baseline: its trainer against a hand-written loop, the job, and bad input."""

import numpy as np
import pytest

import dbkit
from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.ps import local_shards
from dbkit.sync_sgd import SGDTrainer, TrainingDiverged
from dbkit.telemetry import Divergence


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def test_trainer_matches_a_hand_written_numpy_loop(digits):
    net = nn.build("mlp", 64, 10, l2=1e-4)
    trainer = SGDTrainer(net, digits, batch_size=32, lr=0.1)
    for _ in range(30):
        trainer.step()
    # independent reference: the textbook loop over the same batches
    p = net.init_params(0)
    batches = data.MiniBatches(digits.X_train, digits.y_train, 32, seed=0)
    for _ in range(30):
        X, y = next(batches)
        _, g = net.loss_and_grad(p, X, y)
        p = p - np.float32(0.1) * g
    assert np.allclose(trainer.params, p, atol=1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_through_shards_is_bit_identical_to_in_memory(digits, optimizer):
    net = nn.build("mlp", 64, 10, l2=1e-4)
    plain = SGDTrainer(net, digits, lr=0.05, optimizer=optimizer)
    server = local_shards(net.init_params(0), 3, optimizer, 0.05)
    sharded = SGDTrainer(net, digits, lr=0.05, optimizer=optimizer, server=server)
    for _ in range(40):
        plain.step()
        sharded.step()
    assert plain.params.tobytes() == server.fetch().tobytes()
    assert sharded.figures().pushes == 40 and sharded.figures().fetches == 40


def test_the_job_trains_in_the_background_and_records_its_history(digits):
    job = dbkit.SyncSGD("mlp", digits, lr=0.1, eval_every=100)
    with job:
        hist = job.fit(steps=300, progress=False)
        assert [r["step"] for r in hist] == [0, 100, 200, 300]
        assert hist[-1]["train_loss"] < 0.5 * hist[0]["train_loss"]
        assert all(k in hist[-1] for k in ("t", "step", "train_loss", "test_accuracy"))
        assert job.state == "paused" and job.snapshot().step == 300
        job.fit(steps=50, progress=False)
        assert job.snapshot().step == 350
    # the same steps as the trainer alone, to the bit
    trainer = SGDTrainer(job.network, digits, lr=0.1)
    for _ in range(350):
        trainer.step()
    assert job.parameters().tobytes() == trainer.params.tobytes()
    assert job.state == "stopped" and job.report()["steps"] == 350


def test_seconds_budget_and_lr_while_training(digits):
    with dbkit.SyncSGD("mlp", digits, lr=0.05) as job:
        job.fit(seconds=0.3, progress=False)
        assert job.snapshot().step > 0 and job.history[-1]["step"] == job.snapshot().step
        job.set(lr=0.01)
        assert job.config.lr == 0.01 and job.replicas()[0].lr == 0.01


def test_divergence_is_reported_and_parameters_kept(digits):
    net = nn.build("mlp", 64, 10, l2=1e-4)
    trainer = SGDTrainer(net, digits, lr=100.0)
    with pytest.raises(TrainingDiverged, match="Lower the learning rate") as e:
        for _ in range(5000):
            last = trainer.params.copy()
            trainer.step()
    assert np.isfinite(trainer.params).all()
    assert np.array_equal(trainer.params, last)
    assert "lr=100" in str(e.value)


def test_a_diverging_job_ends_as_diverged_and_fit_returns(digits):
    with dbkit.SyncSGD("mlp", digits, lr=100.0) as job:
        job.fit(steps=5000, progress=False)
        assert job.state == "diverged" and job.snapshot().step < 5000
        [event] = job.events.of(Divergence)
        assert "Lower the learning rate" in event.message and "Adagrad" in event.message
    assert job.report()["state"] == "diverged"


@pytest.mark.parametrize("bad", [dict(lr=0), dict(lr=-1), dict(batch_size=0), dict(steps=0), dict(optimizer="adam"),
                                 dict(model="cnn"), dict(n_push=0), dict(replicas=0), dict(l2=-1), dict(seed=-3)])
def test_bad_settings_name_the_setting(bad):
    key = next(iter(bad))
    with pytest.raises(ValueError, match=key):
        RunConfig.make(**bad)
