"""A simulated cluster (``Cluster``: a profile and how many machines) and where a job's parts go on it.

Two ways to lay a job out, as on a real cluster:

- **Shared machines.** With a number of machines (``--machines``, or the
  profile's own: ``here`` has the two workers of the LocalCluster ``dbkit run``
  starts), shards and replicas are spread round-robin over them as dbkit's
  Dask placement does (shard ``j`` on machine ``j % M``, replica ``i`` on
  ``i % M``, partitions as ``dbkit.partition.partition_places``), and the
  driver (Sandblaster's coordinator) has a machine of its own.
- **Machines of their own** (a profile with ``machines = 0`` and no
  ``--machines``, like ``distbelief-2012``): every shard, every partition of
  every replica and the coordinator on a machine of its own, as in the paper.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..places import partition_places
from .machines import Cores, Machine, Network
from .memory import check_memory
from .profile import MachineSpec, Profile, load
from .profile_ranges import MAX_MACHINES
from .simulated import Simulated


@dataclass(frozen=True)
class Cluster:
    """A simulated cluster: ``profile`` (a ``Profile``, a name or a path) and ``machines`` (``None``:
    the profile's own number, or a machine for every part of the job)."""

    profile: Profile | str = "here"
    machines: int | None = None
    #: the model whose arithmetic and bytes are charged (``None``: the job's network); with ``cost_only`` the job's
    #: network is a small stand-in and every message, shard service and update is charged for ``shape``
    shape: Any = None
    cost_only: bool = False
    jitter: str = "none"  # a computation's time: as modelled, or drawn around it ("exponential")
    stack_gradients: bool = True  # gradients due together computed as one stack (the same numbers)

    def __post_init__(self) -> None:
        if not isinstance(self.profile, (Profile, str, os.PathLike)):
            raise TypeError(f"sim.Cluster(profile=...) takes a Profile, a profile's name ('here', 'distbelief-2012') "
                            f"or a JSON file's path, got {self.profile!r}; for the number of machines, "
                            f"give Cluster(machines={self.profile!r})")
        if self.machines is not None and (isinstance(self.machines, bool) or not isinstance(self.machines, int)
                                          or not 1 <= self.machines <= MAX_MACHINES):
            raise ValueError(f"machines must be a whole number in [1, {MAX_MACHINES}], got {self.machines!r}")
        object.__setattr__(self, "profile", load(self.profile))

    #: laid out once, when a job starts: its shards and its replicas' partitions
    fixed_settings: ClassVar[tuple[str, ...]] = ("partitions", "shards")

    def session(self, tag: str = "", network: Any = None, config: Any = None) -> Any:
        """One job's session on these machines (``dbkit.runtime.sim.job_session.JobSession``): the job's
        ``network`` and ``config`` shape its cost model and where its shards go."""
        from .job_session import JobSession  # (it lays the machines out with this module)

        if network is None or config is None:
            raise TypeError("a simulated cluster's session is a job's: give its network= and config=")
        return JobSession(self, network, config, tag)

    def simulation(self) -> Simulated:
        """Its profile and machines, before any simulated second."""
        spec = self.spec
        return Simulated(spec.name, self.machines or spec.machine.machines or None, self.describe())

    def admit(self, network: Any, config: Any) -> None:
        """Refuse, before anything starts, a job these machines cannot run: settings of real machines only,
        or numerics larger than this machine's memory (``memory.check_memory``)."""
        for name in ("scheduler", "checkpoint_dir"):
            if getattr(config, name) is not None:
                raise ValueError(f"{name} does not apply to a simulated cluster (it runs no Dask and has no "
                                 "workers to name)")
        check_memory(network.size, config.replicas, config.algorithm, config.sandblaster.memory)

    @property
    def spec(self) -> Profile:
        assert isinstance(self.profile, Profile)
        return self.profile

    def describe(self) -> str:
        m = self.spec.machine
        count = self.machines or m.machines
        return (f"simulated cluster, profile {self.spec.name}: "
                + (f"{count} machines" if count else "a machine for every shard and replica partition")
                + f" of {m.cores} core{'s' if m.cores != 1 else ''}, {m.bandwidth / 1e6:g} MB/s NICs, "
                f"{m.latency * 1e6:g} us latency"
                + (f", sharing one host of {m.host_cores} cores" if m.host_cores and (count or 0) > 1 else ""))


@dataclass
class Layout:
    """Machines (each made from ``spec``), and where each shard, each replica partition and the
    coordinator runs."""

    spec: Profile
    machines: list[Machine]
    network: Network
    shard_on: list[int]
    replica_on: dict[int, list[int]] = field(default_factory=dict)
    coordinator_on: int | None = None
    shared: bool = True
    host: Cores | None = None  # the one computer the machines are processes of (a LocalCluster), if any

    def machine(self, index: int) -> Machine:
        return self.machines[index]

    def replica_machines(self, replica: int) -> list[Machine]:
        return [self.machines[m] for m in self.replica_on[replica]]

    def add_replica(self, replica: int, partitions: int) -> list[Machine]:
        """Place replica ``replica`` (its ``partitions`` partitions): round-robin on shared machines,
        else on new machines of its own."""
        if self.shared:
            workers = [i for i, m in enumerate(self.machines) if not m.name.startswith("driver")]
            self.replica_on[replica] = [workers[p] for p in partition_places(replica, partitions, len(workers))]
        else:
            names = [f"replica{replica}" + (f"/partition{j}" if partitions > 1 else "") for j in range(partitions)]
            self.replica_on[replica] = [self._new(name) for name in names]
        for j, m in enumerate(self.replica_on[replica]):
            self.machines[m].replicas += 1
            self.machines[m].roles.append(f"replica {replica}" + (f" partition {j}" if partitions > 1 else ""))
        return self.replica_machines(replica)

    def new_machine(self, name: str) -> Machine:
        """One more machine of the profile's kind, named ``name``."""
        return self.machines[self._new(name)]

    def leave(self, replica: int) -> None:
        """Replica ``replica`` has ended: its machines no longer count it (its place stays in ``replica_on``)."""
        for m in self.replica_on.get(replica, []):
            self.machines[m].replicas = max(0, self.machines[m].replicas - 1)

    def _new(self, name: str) -> int:
        self.machines.append(_machine(self.spec.machine, name, self.host))
        return len(self.machines) - 1


def _machine(m: MachineSpec, name: str, host: Cores | None) -> Machine:
    """A machine of ``m``'s kind; on ``host`` when its machines are processes of one computer."""
    return Machine(name, Cores(m.cores), m.bandwidth, cpu_factor=m.cpu_factor, host=host,
                   host_slowdown=m.host_slowdown if host is not None else 1.0, release_seconds=m.release_seconds,
                   handoff_seconds=m.handoff_seconds)


def lay_out(cluster: Cluster, shards: int, coordinator: bool = False) -> Layout:
    """The machines of ``cluster`` with ``shards`` shards (and a coordinator) placed; replicas are
    added with ``Layout.add_replica`` as they start."""
    spec = cluster.spec
    count = cluster.machines or spec.machine.machines
    network = Network(spec.machine.latency, shared=bool(spec.machine.shared_links))
    if count:
        m = spec.machine
        host = Cores(m.host_cores) if m.host_cores else None
        machines = [_machine(m, f"worker{i}", host) for i in range(count)]
        layout = Layout(spec, machines, network, [j % count for j in range(shards)], shared=True, host=host)
    else:
        layout = Layout(spec, [], network, [], shared=False)
        layout.shard_on = [layout._new(f"shard{j}") for j in range(shards)]
    for j, where in enumerate(layout.shard_on):
        layout.machines[where].roles.append(f"shard {j}")
    if coordinator:
        layout.coordinator_on = layout._new("driver")
        layout.machines[layout.coordinator_on].roles.append("coordinator")
    return layout
