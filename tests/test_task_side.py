"""A task and an actor are given the side of the worker they run on, on every runtime, rather than looking it
up: a task as ``fn``'s first argument (``submit_on``), an actor class whose ``takes_side`` is true as
``side=`` when it is placed (a partition's, which listens on its worker's own address)."""

import numpy as np

from dbkit import nn
from dbkit.partition import ownership
from dbkit.runtime import InProcessCluster
from dbkit.runtime.sim import SimSession
from dbkit.runtime.sim.cost import CostModel
from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.layout import lay_out
from dbkit.runtime.sim.shape import ModelShape
from dbkit.sim import Cluster


class Where:
    """An actor that says which worker it was built for."""

    takes_side = True

    def __init__(self, label: str, side) -> None:
        self.label, self.side = label, side

    def where(self) -> str:
        return f"{self.label}@{self.side.address}"


class Unsided:
    """An actor that does not take a side: built without one."""

    def __init__(self, label: str) -> None:
        self.label = label

    def where(self) -> str:
        return self.label


def _task_address(side, label: str) -> str:
    return f"{label}@{side.address}"


def test_on_dask_an_actor_and_a_task_are_given_their_workers_side(local_cluster):
    workers = local_cluster.workers()
    names = [f"where-{k}" for k in range(len(workers))]
    try:
        for name, w in zip(names, workers):
            actor = local_cluster.place_actor(name, Where, name, worker=w)
            assert actor.where().result() == f"{name}@{w}"
        plain = local_cluster.place_actor("unsided", Unsided, "plain", worker=workers[-1])
        assert plain.where().result() == "plain"
        task = local_cluster.submit_on(workers[0], _task_address, "task", key="dbkit-side-task")
        assert task.result(timeout=30) == f"task@{workers[0]}"
    finally:
        local_cluster.registry.release(*[n for n in [*names, "unsided"] if n in local_cluster.registry.names()])


def test_in_process_an_actor_is_given_its_workers_side_and_a_partition_its_address():
    with InProcessCluster(workers=2) as machines:
        session = machines.session("side")
        for w in machines.workers():
            assert session.place_actor(f"at-{w[-1]}", Where, "a", worker=w).where().result(timeout=5) == f"a@{w}"
        assert session.place_actor("plain", Unsided, "plain").where().result(timeout=5) == "plain"
        from dbkit.partition.actors import PartitionActor

        own = ownership(nn.build("mlp", 64, 10, hidden=(8,)), 2)
        part = session.place_actor("part", PartitionActor, 0, own, worker=machines.workers()[1])
        address = part.open_wire().result(timeout=5)
        assert address.wire is None  # an in-process worker's address is not TCP: its partners are in memory
        session.close()


def test_in_virtual_time_an_actor_is_given_its_simulated_machines_side():
    network = nn.build("linear", 64, 10)
    sim, cluster = Simulation(), Cluster(profile="here", machines=3)
    layout = lay_out(cluster, 1, coordinator=True)
    session = SimSession(sim, layout, CostModel(cluster.spec, ModelShape.of(network)),
                         layout.machine(layout.coordinator_on), update_floats=network.size)
    workers = session.workers()
    ends = [session.place_actor(f"w{k}", Where, f"m{k}", worker=w) for k, w in enumerate(workers)]
    plain = session.place_actor("plain", Unsided, "plain", worker=workers[0])
    task = session.drive(lambda: [e.where().result() for e in [*ends, plain]])
    sim.run()
    assert task.result() == [*(f"m{k}@{w}" for k, w in enumerate(workers)), "plain"]
    assert np.isfinite(sim.now) and sim.now > 0  # the calls took simulated time, as messages
