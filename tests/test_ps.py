"""Parameter shards in-process: update rules against hand computation, staleness,
refused pushes, checkpoints, layout and the client helper."""

import numpy as np
import pytest

from dbkit.ps import ParameterShard, PushAnswer, ShardedParameters, balanced_layout, local_shards, staleness_summary
from dbkit.ps.records import Histogram, coarse
from dbkit.ps.shard import AGE_WINDOW


def shard(values, optimizer="sgd", lr=0.5):
    v = np.asarray(values, np.float32)
    return ParameterShard(0, 10, 10 + len(v), v, optimizer, lr)


def test_sgd_step_by_hand():
    s = shard([1.0, 2.0, 3.0], lr=0.5)
    ans = s.push(np.array([2.0, -4.0, 0.0], np.float32), 0)
    assert ans == PushAnswer(True, version=1, staleness=0, age=0)
    assert np.allclose(s.fetch()[1], [0.0, 4.0, 3.0])


def test_adagrad_steps_by_hand():
    s = shard([1.0, 1.0], "adagrad", lr=0.1)
    g1, g2 = np.array([1.0, -2.0]), np.array([3.0, 0.5])
    s.push(g1, 0)
    s.push(g2, 1)
    acc = 0.1 + g1**2 + g2**2  # accumulators start at 0.1
    p = 1.0 - 0.1 * g1 / (np.sqrt(0.1 + g1**2) + 1e-8)
    p = p - 0.1 * g2 / (np.sqrt(acc) + 1e-8)
    assert np.allclose(s.fetch()[1], p, rtol=1e-6)
    assert np.allclose(s.state()["opt_state"], acc, rtol=1e-6)


def test_fetch_returns_a_copy():
    s = shard([1.0, 2.0])
    version, values = s.fetch()
    values[:] = 99.0
    assert np.array_equal(s.fetch()[1], [1.0, 2.0])


def test_staleness_counts_updates_since_the_fetch():
    s = shard(np.zeros(4))
    v0, _ = s.fetch()
    for _ in range(3):
        s.push(np.ones(4), s.fetch()[0])  # fresh: staleness 0
    assert s.push(np.ones(4), v0).staleness == 3  # fetched before those three
    st = s.figures().staleness.summary()
    assert st["count"] == 4 and st["max"] == 3 and st["mean"] == pytest.approx(0.75)


@pytest.mark.parametrize("grad,version,reason", [
    (np.ones(3), 0, "wrong length"),
    (np.array([1.0, np.nan]), 0, "non-finite"),
    (np.array([np.inf, 1.0]), 0, "non-finite"),
    (np.array([1e30, 1.0]), 0, "non-finite"),
    (np.array(["a", "b"]), 0, "not numeric"),
    (np.ones(2), 5, "bad version"),
    (np.ones(2), -1, "bad version"),
])
def test_refused_pushes_are_counted_and_change_nothing(grad, version, reason):
    s = shard([0.25, -0.75], "adagrad")
    before = s.state()
    ans = s.push(grad, version)
    assert not ans.accepted and reason in ans.reason
    after = s.state()
    assert after["params"].tobytes() == before["params"].tobytes()
    assert after["opt_state"].tobytes() == before["opt_state"].tobytes()
    assert after["version"] == before["version"]
    assert s.figures().rejected == 1


def test_checkpoint_round_trip_and_validation():
    s = shard([1.0, 2.0, 3.0], "adagrad")
    s.push(np.ones(3), 0)
    saved = s.state()
    s.push(np.ones(3), 1)
    assert s.load_state(saved) == 1
    assert np.array_equal(s.fetch()[1], saved["params"])
    assert np.array_equal(s.state()["opt_state"], saved["opt_state"])
    current = s.state()
    for broken in [{**saved, "params": np.ones(2)}, {**saved, "start": 0}, {**saved, "opt_state": None},
                   {"params": saved["params"]}, {**saved, "params": np.array([np.nan, 1, 2])}]:
        with pytest.raises(ValueError):
            s.load_state(broken)
        assert s.state()["params"].tobytes() == current["params"].tobytes()


def test_set_lr_validates():
    s = shard([1.0])
    assert s.set_lr(0.25) == 0.25
    for bad in (0, -1, float("nan"), 1e9):
        with pytest.raises(ValueError, match="lr"):
            s.set_lr(bad)
    assert s.figures().lr == 0.25


def test_balanced_layout():
    lay = balanced_layout(10, 3)
    assert lay.ranges == ((0, 4), (4, 7), (7, 10))
    assert lay.owner(4) == 1 and lay.owner(9) == 2
    for size, n in [(10, 0), (3, 4), (0, 1)]:
        with pytest.raises(ValueError):
            balanced_layout(size, n)


@pytest.mark.parametrize("n_shards", [1, 2, 5])
def test_sharded_sgd_equals_one_vector_sgd(n_shards):
    rng = np.random.default_rng(0)
    init = rng.standard_normal(23).astype(np.float32)
    ps = local_shards(init, n_shards, "sgd", 0.1)
    expected = init.copy()
    for _ in range(4):
        g = rng.standard_normal(23).astype(np.float32)
        ps.fetch()
        assert all(a.accepted for a in ps.push(g))
        expected -= np.float32(0.1) * g
    assert np.array_equal(ps.fetch(), expected)
    assert ps.bytes_pushed == 4 * 23 * 4


def test_client_rejects_a_gradient_of_the_wrong_length():
    ps = local_shards(np.zeros(6, np.float32), 2)
    with pytest.raises(ValueError, match="shape"):
        ps.push(np.zeros(5))
    with pytest.raises(ValueError):
        ShardedParameters(ps.shards[:1], ps.layout)


def test_staleness_summary_quantiles():
    from collections import Counter

    s = staleness_summary(Counter({0: 90, 5: 9, 20: 1}))
    assert s["p50"] == 0 and s["p95"] == 5 and s["max"] == 20 and s["count"] == 100
    assert staleness_summary(Counter())["count"] == 0


def test_age_of_a_push_in_examples_by_hand():
    """Age = examples this shard applied since the fetch before the push's oldest gradient, plus its own."""
    s = shard([0.0, 0.0])
    v0, _ = s.fetch()
    assert s.push(np.ones(2), v0, examples=32).age == 32  # nothing else landed: only its own examples
    assert s.push(np.ones(2), v0, examples=64).age == 32 + 64  # 32 landed since that fetch
    v2, _ = s.fetch()
    # a replica fetched at v2, pushed 3 x 16 meanwhile (counted here), and its push's oldest gradient
    # was computed on parameters fetched at v0: everything since v0 counts
    for _ in range(3):
        s.push(np.ones(2), v2, examples=16)
    ans = s.push(np.ones(2), v2, examples=10, first_version=v0)
    assert ans.staleness == 3 and ans.age == 32 + 64 + 3 * 16 + 10
    figures = s.figures()
    assert figures.examples == 32 + 64 + 48 + 10 and figures.age.count == 6


def test_age_looks_back_a_bounded_window_and_bad_first_versions_are_refused():
    s = shard([0.0])
    for _ in range(AGE_WINDOW + 5):
        s.push(np.ones(1), s.version, examples=1)
    # a version older than the window counts from the oldest remembered one
    assert s.push(np.ones(1), 0, examples=1, first_version=0).age == AGE_WINDOW - 1 + 1
    before = s.state()
    ans = s.push(np.ones(1), s.version, first_version=s.version + 1)
    assert not ans.accepted and "first version" in ans.reason
    assert s.state()["params"].tobytes() == before["params"].tobytes()


def test_histogram_windows_and_coarse_bins():
    a = Histogram.of({0: 2, 3: 1})
    b = Histogram.of({0: 5, 3: 1, 7: 2})
    assert (b - a) == Histogram((0, 7), (3, 2)) and (b - a).count == 5
    assert Histogram.total([a, b]).as_counter() == {0: 7, 3: 2, 7: 2}
    assert [coarse(v) for v in (5, 8, 9, 100, 1000)] == [5, 8, 8, 96, 896]
    assert all(coarse(v) <= v < coarse(v) * 1.25 + 1 for v in range(1, 5000))
    assert b.binned(1) == b and b.binned(4) == Histogram((0, 4), (6, 2)) and b.binned(10).as_counter() == {0: 8}
    with pytest.raises(ValueError, match="whole number"):
        b.binned(0)


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_a_gradient_that_starts_at_any_byte_gives_the_same_update(optimizer):
    """Off the network a gradient is a frame cut from a larger message: it may be unaligned."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal(1000).astype(np.float32)
    raw = np.zeros(g.nbytes + 8, np.uint8)
    unaligned = np.ndarray(g.shape, np.float32, buffer=raw.data, offset=2)
    unaligned[:] = g
    assert not unaligned.flags.aligned
    a, b = (ParameterShard(0, 0, 1000, np.ones(1000), optimizer, 0.1) for _ in range(2))
    for _ in range(3):
        assert a.push(g, a.version).accepted and b.push(unaligned, b.version).accepted
    assert a.state()["params"].tobytes() == b.state()["params"].tobytes()
    unaligned[5] = np.nan
    assert not b.push(unaligned, b.version).accepted and b.version == 3
    unaligned[5] = g[5]
    for shard, values in ((a, g), (b, unaligned)):  # Sandblaster's accumulate too
        shard.vectors("zero", "acc")
        assert shard.accumulate("acc", values, (1,)).accepted
    np.testing.assert_array_equal(a.fetch_vector("acc")[1], b.fetch_vector("acc")[1])


def test_a_shard_call_that_never_answers_ends_after_its_bound_with_a_clear_error():
    """An actor call to a dead shard's worker can stay unanswered for ever; every wait has a bound."""
    from concurrent.futures import Future

    from dbkit.ps.client import resolve

    with pytest.raises(TimeoutError, match=r"did not answer within 0\.1s"):
        resolve(Future(), 0.1)
    done = Future()
    done.set_result(7)
    assert resolve(done, 0.1) == 7 and resolve(3, 0.1) == 3

    class Answer:  # a future-like object whose result() takes no timeout: asked as before
        def result(self):
            return 5

    assert resolve(Answer(), 0.1) == 5


def test_named_vectors_are_a_component_that_sees_the_shards_parameters_through_a_restore():
    """Sandblaster's vectors live in ``NamedVectors``, which the shard holds (no mixin): a write to ``params``
    through it is an update of the shard, and after ``load_state`` it still reads the shard's parameters."""
    import numpy as np

    from dbkit.ps import ParameterShard
    from dbkit.ps.vectors import NamedVectors

    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50).astype(np.float32), rng.normal(size=50).astype(np.float32)
    shard = ParameterShard(0, 0, 50, a)
    assert isinstance(shard.named, NamedVectors) and not isinstance(shard, NamedVectors)
    saved = shard.state()
    shard.load_vectors({"grad": b})
    assert shard.vectors("dot", "params", "grad") == pytest.approx(float(np.dot(a.astype(np.float64), b)), rel=1e-6)
    shard.vectors("axpy", -0.5, "grad", "params")  # a write to the parameters: one more version
    assert shard.version == 1 and np.allclose(shard.fetch()[1], a - 0.5 * b)
    shard.load_state(saved)
    assert np.array_equal(shard.fetch_vector("params")[1], a)
    assert shard.vectors("dot", "params", "params") == pytest.approx(float(np.dot(a.astype(np.float64), a)), rel=1e-6)


def test_a_shard_runs_only_its_named_vector_commands_and_refuses_another_by_name():
    shard = ParameterShard(0, 0, 3, np.arange(3, dtype=np.float32))
    shard.vectors("copy", "params", "x")
    assert sorted(shard.vectors("names")) == ["params", "x"]
    with pytest.raises(ValueError, match="no vector command 'load_state'"):
        shard.vectors("load_state", {})  # a shard method, but not a vector command
    assert shard.version == 0 and np.array_equal(shard.fetch()[1], np.arange(3, dtype=np.float32))
