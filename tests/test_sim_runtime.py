"""The runtime protocol in virtual time: the Downpour job's own drivers (``Fleet``, ``Placement``) run on
simulated machines, unchanged, and answer as they do in process and on Dask."""

import numpy as np
import pytest

from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.downpour.fleet import Fleet
from dbkit.downpour.placement import Placement
from dbkit.runtime.sim import SimSession
from dbkit.runtime.sim.cost import CostModel
from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.layout import lay_out
from dbkit.runtime.sim.shape import ModelShape
from dbkit.sim import Cluster
from dbkit.sync_sgd import SGDTrainer


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def drivers(network, digits, config, machines=2):
    """A simulation, a session on ``machines`` simulated machines and a driver's machine, and the job's
    placement and fleet on it."""
    sim = Simulation()
    cluster = Cluster(profile="here", machines=machines)
    layout = lay_out(cluster, config.shards, coordinator=True)
    assert layout.coordinator_on is not None
    session = SimSession(sim, layout, CostModel(cluster.spec, ModelShape.of(network)),
                         layout.machine(layout.coordinator_on), update_floats=network.size)
    placement = Placement(session, network, config, session.workers(), session.workers())
    fleet = Fleet(session, placement, network, digits, config, tag="sim")
    return sim, session, placement, fleet


def drive(sim, session, fn):
    """Run ``fn`` as the driver's task until the simulation has nothing left to do; its value."""
    task = session.drive(fn)
    sim.run()
    return task.result()


def test_one_simulated_replica_through_the_fleet_is_sync_sgd_bit_for_bit(digits):
    # One blocking replica (n_fetch = n_push = 1) is sync SGD whatever the runtime: the fleet starts it
    # on a simulated machine, caps it at 60 steps, and its shards end where plain SGD ends.
    config = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="sgd", replicas=1, shards=2, overlap=False)
    net = nn.build("mlp", 64, 10, l2=config.l2)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    sim, session, placement, fleet = drivers(net, digits, config)

    def job():
        placement.place_shards(net.init_params(config.seed), config.optimizer, config.lr)
        fleet.set_caps(60)
        fleet.start(1, warm_start=False)
        assert fleet.wait_for(lambda f: f.state == "paused", None, timeout=600.0)
        steps = fleet.total_steps()
        fleet.stop_all()
        return steps, placement.parameters()

    steps, params = drive(sim, session, job)
    assert steps == 60
    assert params.tobytes() == base.params.tobytes()
    assert fleet.figures()[0].state == "stopped" and fleet.figures()[0].worker == "worker0"
    assert sim.now > 0  # the steps took virtual time


def test_the_fleet_resizes_steers_and_stops_simulated_replicas(digits):
    config = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="adagrad", replicas=3, shards=2,
                            n_fetch=1, n_push=1)
    net = nn.build("linear", 64, 10)
    sim, session, placement, fleet = drivers(net, digits, config, machines=3)
    seen = {}

    def job():
        placement.place_shards(net.init_params(config.seed), config.optimizer, config.lr)
        fleet.start(3, warm_start=False)
        fleet.wait_for(lambda f: f.steps >= 20, None, timeout=600.0)
        seen["grown"] = fleet.resize(5)
        fleet.steer(n_push=4)  # returns once every live replica acted on it
        seen["pushes"] = {i: f.pushes for i, f in fleet.figures().items()}
        fleet.wait_for(lambda f: f.steps >= 60, None, timeout=600.0)
        seen["shrunk"] = fleet.resize(2)
        fleet.stop_all()
        seen["shards"] = placement.shard_figures()  # asked of the shards: virtual calls, from the driver's task
        return placement.parameter_state()

    params, accumulators = drive(sim, session, job)
    assert seen["grown"].start == (3, 4)
    assert seen["shrunk"].stop == (4, 3, 2)
    figures = fleet.figures()
    assert {i: f.state for i, f in figures.items()} == {0: "stopped", 1: "stopped", 2: "removed", 3: "removed",
                                                        4: "removed"}
    assert {f.worker for f in figures.values()} == {"worker0", "worker1", "worker2"}  # round-robin
    # n_push = 4 from the steer on: a replica's pushes grew by about a quarter of its later steps
    for i in (0, 1):
        later = figures[i].pushes - seen["pushes"][i]
        assert later <= (figures[i].steps + 3) // 4
    # every push reached both shards, and the shards hold what Adagrad made of them
    updates = sum(s.updates for s in seen["shards"])
    assert updates == config.shards * sum(f.pushes for f in figures.values())
    assert accumulators is not None and np.all(accumulators > 0)
    assert np.all(np.isfinite(params))


def test_a_straggler_sleeps_in_virtual_time(digits):
    # A replica told it is 4x slow sleeps three times its step after each step: over the same virtual
    # seconds it takes about a quarter of the steps of a replica on an identical machine.
    config = RunConfig.make(algorithm="downpour", lr=0.02, optimizer="sgd", replicas=2, shards=1)
    net = nn.build("linear", 64, 10)
    sim, session, placement, fleet = drivers(net, digits, config)

    def job():
        placement.place_shards(net.init_params(config.seed), config.optimizer, config.lr)
        fleet.start(2, warm_start=False)
        fleet.set_slow({0: 4.0})
        session.time.sleep(2.0)
        fleet.poll()
        steps = {i: f.steps for i, f in fleet.figures().items()}
        fleet.stop_all()
        return steps

    steps = drive(sim, session, job)
    assert steps[1] > 100
    assert 0.15 <= steps[0] / steps[1] <= 0.35, steps


def test_a_lost_simulated_machine_ends_its_replica(digits):
    config = RunConfig.make(algorithm="downpour", lr=0.02, optimizer="sgd", replicas=2, shards=1)
    net = nn.build("linear", 64, 10)
    sim, session, placement, fleet = drivers(net, digits, config)

    def job():
        placement.place_shards(net.init_params(config.seed), config.optimizer, config.lr)
        fleet.start(2, warm_start=False)
        session.time.sleep(0.5)
        session.drop_worker("worker1")  # replica 1's machine (the shard is on worker0)
        fleet.wait_for(lambda f: False, [1], timeout=0.5)  # polls: the dead machine's control is lost
        before = fleet.figures()[0].steps
        session.time.sleep(0.5)
        fleet.poll()
        after = fleet.figures()[0].steps
        fleet.stop_all()
        return before, after

    before, after = drive(sim, session, job)
    figures = fleet.figures()
    assert figures[1].state == "lost" and "worker1" in (figures[1].error or "")
    assert after > before  # the other replica trains on
    assert figures[0].state == "stopped"
