"""Sandblaster L-BFGS in virtual time against scipy, with balancing and backups checked by their counts."""

import dataclasses

import numpy as np
import pytest
import scipy.optimize

from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.sim import Cluster, load_profile, simulated_run
from dbkit.telemetry import validate_report


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.fixture(scope="module")
def reference(digits):
    """scipy's L-BFGS on the same objective, to a tight tolerance (the Sandblaster tests' reference)."""
    net = nn.build("linear", 64, 10, l2=1e-2)
    X = digits.X_train.astype(np.float64)
    return scipy.optimize.minimize(lambda p: net.loss_and_grad(p, X, digits.y_train),
                                   net.init_params(0).astype(np.float64), jac=True, method="L-BFGS-B",
                                   options=dict(maxiter=1000, gtol=1e-9, ftol=1e-15))


def sandblaster(digits, cluster, **settings):
    net = nn.build("linear", 64, 10, l2=1e-2)
    cfg = RunConfig.make(algorithm="sandblaster", model="linear", l2=1e-2, steps=10**6, eval_every=1,
                         **{"iterations": 200, "gtol": 1e-6, "ftol": 1e-12, "shards": 2, **settings})
    return simulated_run(cfg, cluster, network=net, data=digits), net


@pytest.mark.parametrize("replicas,slow", [(1, ()), (3, ((0, 5.0),)), (30, ((1, 20.0), (2, 20.0)))])
def test_reaches_scipys_loss_whatever_the_replicas_and_stragglers(digits, reference, replicas, slow):
    run, net = sandblaster(digits, Cluster("here"), replicas=replicas, slow_replicas=slow)
    report = run.run()
    assert validate_report(report) == [] and report["simulated"] is True
    assert run.state == "finished"
    ours = net.loss(run.parameters().astype(np.float64), digits.X_train.astype(np.float64), digits.y_train)
    assert abs(ours - reference.fun) <= 1e-6 * reference.fun  # as test_sandblaster's tolerance against scipy
    assert report["sandblaster"]["iterations"] <= reference.nit + 10


def compute_bound():
    """The ``here`` profile with work units' messages free: a unit's time is its arithmetic."""
    base = dataclasses.replace(load_profile("here"), measured={})
    return base.but(message={"task_seconds": 1e-9, "control_seconds": 1e-9, "cpu_seconds": 0.0,
                             "cpu_seconds_per_byte": 0.0}, machine={"latency": 0.0})


def test_a_straggler_gets_fewer_units_and_each_unit_is_won_once(digits):
    run, _ = sandblaster(digits, Cluster(compute_bound(), machines=4), replicas=3, slow_replicas=((0, 5.0),),
                         work_unit_size=20, iterations=5)
    report = run.run()
    sb = report["sandblaster"]
    units = {i: sb["units_per_replica"].get(str(i), 0) for i in range(3)}  # a replica that won none is left out
    assert units[0] < min(units[1], units[2])  # balancing: the slow replica did less
    n_units = len(run.job.dispatcher.units)
    assert sum(units.values()) == n_units * sb["batch_evaluations"]  # every unit of every batch won exactly once
    assert sb["backups_issued"] > 0 and 0 <= sb["backups_won"] <= sb["backups_issued"]


def test_same_seed_same_report(digits):
    reports = []
    for _ in range(2):
        run, _ = sandblaster(digits, Cluster("here"), replicas=4, slow_replicas=((1, 3.0),), iterations=5)
        r = run.run()
        r["simulation"].pop("real_seconds")  # wall-clock facts of the run, not its results
        r.pop("created")
        reports.append(r)
    assert reports[0] == reports[1]


def test_work_units_computed_as_a_stack_give_the_run_computed_one_by_one_bit_for_bit(digits):
    """Units due together are computed as one stack (``GradientBatch``): the same run as unit by unit."""
    reports = []
    for stack in (True, False):
        net = nn.build("linear", 64, 10, l2=1e-2)
        cfg = RunConfig.make(algorithm="sandblaster", model="linear", l2=1e-2, steps=10**6, eval_every=1,
                             iterations=5, shards=2, replicas=30, slow_replicas=((1, 3.0),))
        r = simulated_run(cfg, Cluster("distbelief-2012"), network=net, data=digits, stack_gradients=stack).run()
        reports.append((r.pop("simulation"), r, r.pop("created")))
    (sim1, stacked, _), (sim2, alone, _) = reports
    assert sim1["stacked_gradients"] > 100 and sim2["stacked_gradients"] == 0
    assert stacked == alone and sim1["virtual_seconds"] == sim2["virtual_seconds"]


def test_each_work_unit_and_flush_is_a_task_costing_its_two_messages(digits):
    """The run is ``UnitBatch`` submitting tasks through the simulated runtime: one replica does a batch's units
    one after another, each a task whose sending and answer each take ``task_seconds``, then one flush task. So
    a batch takes (2 x units + 2) task messages more when each costs more; the arithmetic is the same."""
    def batch_seconds(task_seconds):
        profile = compute_bound().but(message={"task_seconds": task_seconds})
        run, _ = sandblaster(digits, Cluster(profile, machines=2), replicas=1, work_unit_size=200, iterations=2)
        report = run.run()
        started = [e for e in report["events"] if e["type"] == "ReplicaEvent" and e["what"] == "started"]
        assert [e["replica"] for e in started] == [0]
        return report["sandblaster"]["batch_seconds_median"], len(run.job.dispatcher.units)

    (fast, units), (slow, _) = batch_seconds(1e-4), batch_seconds(1e-2)
    assert units == 9  # the training examples in 8 units of at most 200, and the L2 penalty's unit
    assert slow - fast == pytest.approx((2 * units + 2) * (1e-2 - 1e-4), rel=1e-6)
