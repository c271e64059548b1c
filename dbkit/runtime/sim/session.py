"""One job's session on simulated machines: the runtime protocol in virtual time (``dbkit.runtime.Runtime``).

The drivers that run a job on Dask or in process (``Fleet``, ``Placement``)
run here unchanged, as tasks of a simulation: every actor placed is dbkit's
own object behind a queue on its machine (``dbkit.runtime.sim.shard_service``: a
call is a message, served in turn, answered at a virtual time), every task
submitted is a greenlet on its machine (a replica's loop, with a network
whose gradients take the machine's modelled time), and the driver's polls and
bounded waits are in virtual seconds (``time``). So a Downpour job's
fleet places, steers, resizes and stops hundreds of simulated replicas with
the lines that place, steer, resize and stop real ones.

A partition actor's methods wait (for its partners' boundary slices, for its
shards): each call to one is served in a task of its own on its machine
(``actor_in_tasks``), and the simulator gives the session the partition to place
(``stand_in``), so the job's ``PartitionPlacement`` places partitioned replicas too.
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from ...ps import ParameterShard
from ..inprocess.cluster import NoWires
from ..real_machines import RealMachines
from ..registry import ActorRegistry
from ..run_here import run_here
from .actor_in_tasks import ActorInTasks
from .compute import GradientBatch, TimedNetwork
from .cost import CostModel
from .ends import ActorEnd, Placed
from .engine import Simulation
from .layout import Layout
from .machines import Machine
from .shard_service import ShardService
from .task import SimTask
from .task_side import SimTaskSide, VirtualTime
from .wakeups import Wakeups


class SimSession(RealMachines):  # (its calls already run in tasks: ``JobSession`` hosts a job's own)
    """A ``Runtime`` over ``layout``'s machines on ``sim``, charged by ``cost``; the driver's calls leave
    from ``driver`` (a machine of the layout).

    ``gradients`` stacks the gradients due together (the same numbers); ``update_floats`` and ``threads``
    are a replica's per-step vector work and the cores one gradient is split across (``TimedNetwork``);
    ``float_scale`` charges each shard as that many times its size (a cost-only run).
    """

    registry: ActorRegistry
    wires: NoWires

    def __init__(self, sim: Simulation, layout: Layout, cost: CostModel, driver: Machine, tag: str = "",
                 gradients: GradientBatch | None = None, update_floats: int = 0, threads: int = 1,
                 float_scale: float = 1.0, jitter: str = "none", seed: int = 0) -> None:
        self.sim, self.layout, self.cost, self.driver = sim, layout, cost, driver
        self.tag = tag or uuid.uuid4().hex[:10]
        self.registry = ActorRegistry()
        self.wires = NoWires()
        self.time = VirtualTime(sim)
        self.gradients, self.update_floats, self.threads_per_task = gradients, update_floats, threads
        self.float_scale, self.jitter, self.seed = float_scale, jitter, seed
        self._machines = {m.name: m for m in layout.machines}
        self._actors: dict[str, ShardService | ActorInTasks] = {}  # key -> the actor behind its queue, on its machine
        #: each parameter shard's queue by shard index, the latest placed (kept for the report once released)
        self.shard_queues: dict[int, ShardService] = {}
        self._stand_ins: dict[type, Callable[..., Any]] = {}
        self._dropped: set[str] = set()
        self.wakeups = Wakeups(sim)  # tasks waiting for a message to reach their machine, or for a task's end
        self._tasks: list[SimTask] = []
        self._keep_at = 256
        self._timed: dict[tuple[str, int, int], TimedNetwork] = {}  # (machine, task number, network) -> its stream
        self._closed = False
        # one thread (the simulation's) runs every greenlet of a session: nothing here needs a lock

    @property
    def kind(self) -> str:
        return "simulated"

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- machines ------------------------------------------------------------------------------
    def machine(self, address: str) -> Machine:
        m = self._machines.get(address)
        if m is None:  # a machine the layout gained since (a new replica's)
            self._machines = {m.name: m for m in self.layout.machines}
            m = self._machines.get(address)
        if m is None:
            raise RuntimeError(f"no simulated machine {address}")
        return m

    def alive(self, address: str) -> bool:
        return address not in self._dropped

    def workers(self) -> list[str]:
        """The live machines a job's parts may go to (not the driver's), in the layout's order."""
        return [m.name for m in self.layout.machines if m is not self.driver and m.name not in self._dropped]

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> list[str]:
        workers = self.workers()
        if len(workers) < n:
            raise RuntimeError(f"the simulated cluster has {len(workers)} machines, fewer than {n}")
        return workers

    def threads(self) -> dict[str, int]:
        return {w: self.machine(w).cores.n for w in self.workers()}

    # ---- actors --------------------------------------------------------------------------------
    def place_actor(self, name: str, cls: type, *args: Any, worker: str | None = None, **kwargs: Any) -> ActorEnd:
        if self._closed:
            raise RuntimeError("this session is closed")
        address = worker if worker is not None else self.workers()[len(self.registry) % len(self.workers())]
        if not self.alive(address):
            raise RuntimeError(f"simulated machine {address} was lost")
        key = f"dbkit-{name}-{self.tag}"
        args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)  # arguments arrive as copies, as pickled
        machine = self.machine(address)
        if getattr(cls, "takes_side", False):
            kwargs["side"] = SimTaskSide(self, address, lambda: not self.alive(address))
        stand_in = self._stand_ins.get(cls)
        if stand_in is None:
            service = self._actors[key] = ShardService(self.sim, cls(*args, **kwargs), machine, self.layout.network,
                                                       self.cost, self.float_scale)
            if isinstance(service.shard, ParameterShard):
                self.shard_queues[service.shard.index] = service
        else:  # an actor whose methods wait: each call in a task of its own
            self._actors[key] = ActorInTasks(self.sim, stand_in(machine, *args, **kwargs), machine,
                                             self.layout.network, self.cost, self.cost.partition_call_seconds())
        proxy = self.end(key, self.driver.name)
        self.registry.add(name, Placed(self.remove, key), proxy, address)
        return proxy

    def end(self, key: str, caller: str) -> ActorEnd:
        """Machine ``caller``'s end of actor ``key``: each call a message to its queue."""
        service = self._actors.get(key)
        if service is None or not self.alive(service.machine.name):
            raise RuntimeError(f"{key}: no such actor on a live simulated machine")
        caller_machine = self.driver if caller == self.driver.name else self.machine(caller)
        if isinstance(service, ActorInTasks):  # (a partition: called as an actor on another worker is)
            return ActorEnd(key, service, caller_machine, self.alive, None,  # type: ignore[arg-type]
                            call_seconds=self.cost.partition_call_seconds())
        served = isinstance(service.shard, ParameterShard)  # a control object's calls wake its machine's waiters
        return ActorEnd(key, service, caller_machine, self.alive, None if served else self.wakeups.touched)

    def in_process(self, key: str, caller: str) -> Any | None:
        """Actor ``key`` itself if it lives on ``caller`` and is not served (a shard is: see ``SimTaskSide``)."""
        service = self._actors.get(key)
        if service is None or service.machine.name != caller or isinstance(service.shard, ParameterShard):
            return None
        return service.shard

    def stand_in(self, cls: type, make: Callable[..., Any]) -> None:
        """Place ``make(machine, *args, **kwargs)`` where ``cls(*args, **kwargs)`` is asked for: an actor whose
        methods wait in virtual time (a partition's stand-in, ``dbkit.partition.simulated``), served in tasks."""
        self._stand_ins[cls] = make

    def actor(self, key: str) -> Any:
        """The object placed under ``key`` itself (a simulated partition finds its partners so)."""
        return self._actors[key].shard

    def remove(self, key: str) -> None:
        self._actors.pop(key, None)

    # ---- tasks ---------------------------------------------------------------------------------
    def submit_on(self, worker: str, fn: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> SimTask:
        """``fn`` as a task on machine ``worker``; its arguments are passed as they are (a simulated machine
        shares this process's memory, and the drivers never change what they send). It begins one task
        message after now and is seen to end one after its last line (the profile's ``task_seconds``)."""
        if self._closed:
            raise RuntimeError("this session is closed")
        machine = self.machine(worker)
        machine.replicas += 1  # the tasks sharing a machine's cores slow each other (the profile's contention)
        role = _role(key)
        if role not in machine.roles:
            machine.roles.append(role)
        number = _number(key, len(self._tasks))
        message = self.cost.task_seconds()  # sending a task, and its answer (a Sandblaster unit's round trip)
        task = SimTask(self.sim, key, fn, args, kwargs, worker=worker, on_end=functools.partial(_leave, machine),
                       side=lambda t: SimTaskSide(self, worker, lambda: t.cancelled or not self.alive(worker),
                                                  number), start_after=message, answer_after=message,
                       on_done=self.wakeups.task_ended)
        self._keep(task)
        return task

    def drive(self, fn: Callable[..., Any], *args: Any, key: str = "driver") -> SimTask:
        """``fn(*args)`` as a task on the driver's machine: a driver's code, whose calls and waits take
        virtual time, runs in one of these."""
        task = SimTask(self.sim, key, fn, args, {}, on_done=self.wakeups.task_ended)
        self._keep(task)
        return task

    def _keep(self, task: SimTask) -> None:
        """Keep ``task`` (to lose or cancel it); those that ended are let go now and then (a Sandblaster run
        submits a task per work unit)."""
        if len(self._tasks) >= self._keep_at:
            self._tasks = [t for t in self._tasks if not t.done()]
            self._keep_at = max(256, 2 * len(self._tasks))
        self._tasks.append(task)

    def timed(self, network: Any, address: str, number: int = 0) -> TimedNetwork:
        """``network`` as task ``number`` (a replica's index) on machine ``address`` computes with it: each
        gradient holds a core for the cost model's time (drawn, with jitter, from the task's own stream). The
        same task number on the same machine goes on with the same stream (a replica's Sandblaster units)."""
        known = (address, number, id(network))
        timed = self._timed.get(known)
        if timed is None or timed.network is not network:
            rng = np.random.default_rng([self.seed, number])
            timed = self._timed[known] = TimedNetwork(
                network, self.sim, self.machine(address), self.cost, update_floats=self.update_floats,
                threads=self.threads_per_task, jitter=self.jitter, rng=rng, batch=self.gradients)
        return timed

    def put(self, value: Any, worker: str) -> Any:
        return value

    def wait(self, futures: list[SimTask], timeout: float, first: bool = False) -> None:
        """Return once all of ``futures`` (with ``first``: one) are done, or after ``timeout`` virtual seconds:
        the waiting task looks again each time a task of this session ends (no polling)."""
        self.wakeups.wait_for_tasks(futures, timeout, first)

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        return run_here(self.workers(), fn, *args)

    def lost(self, grace: float = 2.0) -> str | None:
        return None

    def drop_worker(self, address: str) -> None:
        """Machine ``address`` dies: its actors are gone, its tasks end at their next step."""
        self._dropped.add(address)
        for key in [k for k, s in self._actors.items() if s.machine.name == address]:
            self.remove(key)
        for t in self._tasks:
            if t.worker == address:
                t.lose()

    def dashboard_link(self) -> str | None:
        return None

    def close(self) -> None:
        """Release every actor; tasks still running are cancelled (they end at their next step)."""
        if self._closed:
            return
        self._closed = True
        self.registry.clear()
        for t in self._tasks:
            t.cancel()

    def __repr__(self) -> str:
        return f"<simulated session {self.tag}: {len(self._actors)} actors on {len(self.workers())} machines>"


def _number(key: str, otherwise: int) -> int:
    """A task's number: the replica's index its key names (``dbkit-replica-3-...``), else ``otherwise``."""
    m = re.search(r"replica-(\d+)", key)
    return int(m.group(1)) if m else otherwise


def _role(key: str) -> str:
    """A task's role on its machine for the report: ``replica 3`` for a replica's task, else its key."""
    m = re.search(r"replica-(\d+)", key)
    return f"replica {m.group(1)}" if m else key


def _leave(machine: Machine) -> None:
    machine.replicas = max(0, machine.replicas - 1)
