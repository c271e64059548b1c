"""Sandblaster L-BFGS on the in-process runtime: the same batch, dispatcher and coordinator as on Dask,
checked against scipy and the single-process gradient, with a slow replica and a lost worker."""

import numpy as np
import pytest
import scipy.optimize

from dbkit import data, nn
from dbkit.runtime import InProcessCluster
from dbkit.sandblaster import SandblasterLBFGS
from dbkit.telemetry import ErrorEvent, validate_report

from .sandblaster_checks import exact_gradient_despite, paused, reference


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def test_sandblaster_in_process_matches_scipy(digits):
    net = nn.build("linear", 64, 10, l2=1e-2)
    with InProcessCluster(workers=2) as m, SandblasterLBFGS(net, digits, cluster=m, replicas=2, shards=2,
                                                            work_unit_size=300, iterations=200, gtol=1e-6,
                                                            ftol=1e-12) as sb:
        sb.fit(progress=False)
        assert sb.state == "finished"
    report = sb.report()
    assert validate_report(report) == [] and report["cluster"]["kind"] == "in-process"
    X = digits.X_train.astype(np.float64)
    ref = scipy.optimize.minimize(lambda p: net.loss_and_grad(p, X, digits.y_train),
                                  net.init_params(0).astype(np.float64), jac=True, method="L-BFGS-B",
                                  options=dict(maxiter=1000, gtol=1e-9, ftol=1e-15))
    assert abs(net.loss(sb.parameters().astype(np.float64), X, digits.y_train) - ref.fun) <= 1e-6 * ref.fun
    assert all(n > 0 for n in report["sandblaster"]["units_per_replica"].values())


@pytest.mark.parametrize("replicas,unit_size", [(1, 500), (3, 37)])
def test_units_in_process_give_the_full_batch_gradient(digits, replicas, unit_size):
    net = nn.build("mlp", 64, 10, hidden=(16,), l2=0.01)
    with InProcessCluster(workers=2) as m, paused(SandblasterLBFGS(net, digits, cluster=m, replicas=replicas,
                                                                    shards=2, work_unit_size=unit_size)) as sb:
        f, acc = sb.batch_gradient()
        params = sb.parameters()
    fr, gr = reference(net, params, digits)
    assert abs(f - fr) < 1e-5 * fr
    np.testing.assert_allclose(acc, gr, atol=2e-6)


def test_a_slow_replica_in_process_does_fewer_units_and_backups_keep_the_result(digits):
    net = nn.build("mlp", 64, 10, hidden=(16,), l2=0.01)
    with InProcessCluster(workers=2) as m, paused(SandblasterLBFGS(net, digits, cluster=m, replicas=3, shards=2,
                                                                    work_unit_size=40, slow_replicas={0: 10})) as sb:
        for _ in range(3):
            f, acc = sb.batch_gradient()
        d = sb.dispatcher
        assert d.lost == [] and d.backups_issued > 0
        assert d.units_done[0] * 3 < min(d.units_done[1], d.units_done[2])
        params = sb.parameters()
    fr, gr = reference(net, params, digits)
    assert abs(f - fr) < 1e-5 * fr
    np.testing.assert_allclose(acc, gr, atol=2e-6)


@pytest.mark.parametrize("moment", range(6))
def test_a_replica_worker_lost_at_any_moment_in_process_never_costs_the_exact_gradient(digits, moment):
    """As tests/test_sandblaster.py's ten moments with a killed process: the lost worker's threads may
    still be computing, but nothing they send arrives, so the batch gradient stays exact."""
    net = nn.build("mlp", 64, 10, hidden=(16,), l2=0.01)
    with InProcessCluster(workers=3) as m:
        w = m.workers()
        with paused(SandblasterLBFGS(net, digits, cluster=m, replicas=2, shards=1, work_unit_size=40,
                                      slow_replicas={1: 4}, shard_workers=[w[0]], replica_workers=[w[1], w[2]])) as sb:
            victim = sb.dispatcher.slots[1].worker
            exact_gradient_despite(sb, net, digits, lambda: m.lose_worker(victim), 0.02 * moment)
            assert sb.state == "paused", sb.events.last(ErrorEvent)
            assert [x.replica for x in sb.dispatcher.lost] == [1]
            assert validate_report(sb.report()) == []


def test_replicas_added_and_removed_between_batches_share_the_next_batch_exactly(digits):
    """``set(replicas=...)`` on a paused Sandblaster: a new replica (its actor, slot and data) takes units
    from the next batch on, a removed one none, and every batch still gives the full-batch gradient."""
    net = nn.build("mlp", 64, 10, hidden=(16,), l2=0.01)
    with InProcessCluster(workers=2) as m, paused(SandblasterLBFGS(net, digits, cluster=m, replicas=2, shards=2,
                                                                    work_unit_size=60)) as sb:
        sb.set(replicas=3)
        d = sb.dispatcher
        f, acc = sb.batch_gradient()
        assert [s.index for s in d.live()] == [0, 1, 2] and d.units_done[2] > 0
        fr, gr = reference(net, sb.parameters(), digits)
        assert abs(f - fr) < 1e-5 * fr
        np.testing.assert_allclose(acc, gr, atol=2e-6)
        sb.set(replicas=1)
        done = dict(d.units_done)
        f, acc = sb.batch_gradient()
        assert [s.index for s in d.live()] == [0] and d.units_done[1] == done[1] and d.units_done[2] == done[2]
        np.testing.assert_allclose(acc, reference(net, sb.parameters(), digits)[1], atol=2e-6)
        assert [e.what for e in sb.events if getattr(e, "what", None) == "removed"] == ["removed", "removed"]
