"""One job's session on simulated machines: the runtime protocol in virtual time (``dbkit.runtime.Runtime``).

The drivers that run a job on Dask or in process (``Fleet``, ``Placement``)
run here unchanged, as tasks of a simulation: every actor placed is dbkit's
own object behind a queue on its machine (``dbkit.sim.shard_service``: a
call is a message, served in turn, answered at a virtual time), every task
submitted is a greenlet on its machine (a replica's loop, with a network
whose gradients take the machine's modelled time), and the driver's polls and
bounded waits are in virtual seconds (``time``). So a Downpour job's
fleet places, steers, resizes and stops hundreds of simulated replicas with
the lines that place, steer, resize and stop real ones.

What is not modelled: a partition actor's own calls to its shards (they
would wait inside a service), so partitioned replicas stay with the
simulator's own driver (``dbkit.sim.downpour``).
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
from collections.abc import Callable
from typing import Any

import greenlet
import numpy as np

from ...ps import ParameterShard
from ...sim.compute import TimedNetwork
from ...sim.cost import CostModel
from ...sim.engine import Simulation
from ...sim.gradient_batch import GradientBatch
from ...sim.layout import Layout
from ...sim.machines import Machine
from ...sim.shard_service import ShardEnd, ShardService, VirtualFuture
from ..inprocess.cluster import NoWires
from ..registry import ActorRegistry
from .task import SimTask
from .task_side import SimTaskSide, VirtualTime


class ActorEnd(ShardEnd):
    """One caller's end of a simulated actor (a shard's is a ``ShardEnd``): ``key`` names the actor. A call
    to an actor whose machine died raises ``RuntimeError`` at once, as a Dask actor's does; once served, a
    call tells ``touched`` (the session's: the tasks waiting on that machine look again), if given."""

    def __init__(self, key: str, service: ShardService, client: Machine, alive: Callable[[str], bool],
                 touched: Callable[[str], None] | None) -> None:
        super().__init__(service, client)
        self.key, self._alive, self._touched = key, alive, touched

    def _call(self, kind: str, apply: Callable[[Any], Any], service: float, floats_up: int, floats_down: int,
              control: bool = False) -> VirtualFuture:
        where = self.service.machine.name
        if not self._alive(where):
            raise RuntimeError(f"Worker holding Actor was lost: simulated machine {where}")
        touched = self._touched
        if touched is None:  # (a shard: no task waits on its calls)
            return super()._call(kind, apply, service, floats_up, floats_down, control)

        def applied(actor: Any) -> Any:  # then the machine's waiting tasks look again
            try:
                return apply(actor)
            finally:
                touched(where)

        return super()._call(kind, applied, service, floats_up, floats_down, control)


class _Placed:
    """What the registry holds for a simulated actor: releasing it takes it off its machine."""

    def __init__(self, session: SimSession, key: str) -> None:
        self.session, self.key = session, key

    def release(self) -> None:
        self.session.remove(self.key)


class SimSession:
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
        self._actors: dict[str, ShardService] = {}  # key -> the actor behind its queue, on its machine
        self._dropped: set[str] = set()
        self._waiting: dict[str, list[Any]] = {}  # machine -> its tasks waiting for a message (``wait_on``)
        self._calls: dict[str, int] = {}  # machine -> calls served by its actors so far
        self._tasks: list[SimTask] = []
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
        for m in self.layout.machines:
            if m.name == address:
                return m
        raise RuntimeError(f"no simulated machine {address}")

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
        actor = cls(*copy.deepcopy(args), **copy.deepcopy(kwargs))  # arguments arrive as copies, as pickled
        self._actors[key] = ShardService(self.sim, actor, self.machine(address), self.layout.network, self.cost,
                                         self.float_scale)
        proxy = self.end(key, self.driver.name)
        self.registry.add(name, _Placed(self, key), proxy, address)
        return proxy

    def end(self, key: str, caller: str) -> ActorEnd:
        """Machine ``caller``'s end of actor ``key``: each call a message to its queue."""
        service = self._actors.get(key)
        if service is None or not self.alive(service.machine.name):
            raise RuntimeError(f"{key}: no such actor on a live simulated machine")
        caller_machine = self.driver if caller == self.driver.name else self.machine(caller)
        served = isinstance(service.shard, ParameterShard)  # a control object's calls wake its machine's waiters
        return ActorEnd(key, service, caller_machine, self.alive, None if served else self.touched)

    def in_process(self, key: str, caller: str) -> Any | None:
        """Actor ``key`` itself if it lives on ``caller`` and is not served (a shard is: see ``SimTaskSide``)."""
        service = self._actors.get(key)
        if service is None or service.machine.name != caller or isinstance(service.shard, ParameterShard):
            return None
        return service.shard

    def wait_on(self, address: str, seconds: float) -> None:
        """The current task waits on machine ``address`` until a call reaches an actor there, or ``seconds``."""
        me = greenlet.getcurrent()
        waiting = self._waiting.setdefault(address, [])
        waiting.append(me)
        resume = me.switch

        def expire() -> None:
            if me in waiting:
                waiting.remove(me)
                resume()

        cancel = self.sim.timeout(seconds, expire)
        self.sim._suspend()
        cancel()

    def touched(self, address: str) -> None:
        """A call reached an actor on ``address``: its waiting tasks go on at this instant, once the call is
        served (scheduled, never switched to from inside the service)."""
        self._calls[address] = self._calls.get(address, 0) + 1
        waiting = self._waiting.get(address)
        if waiting:
            woken, waiting[:] = list(waiting), []
            for g in woken:
                self.sim.at(0.0, g.switch)

    def calls_on(self, address: str) -> int:
        """Calls served by the actors of machine ``address`` so far."""
        return self._calls.get(address, 0)

    def remove(self, key: str) -> None:
        self._actors.pop(key, None)

    # ---- tasks ---------------------------------------------------------------------------------
    def submit_on(self, worker: str, fn: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> SimTask:
        """``fn`` as a task on machine ``worker``; its arguments are passed as they are (a simulated machine
        shares this process's memory, and the drivers never change what they send)."""
        if self._closed:
            raise RuntimeError("this session is closed")
        machine = self.machine(worker)
        machine.replicas += 1  # the tasks sharing a machine's cores slow each other (the profile's contention)
        machine.roles.append(_role(key))
        number = _number(key, len(self._tasks))
        task = SimTask(self.sim, key, fn, args, kwargs, worker=worker, on_end=functools.partial(_leave, machine),
                       side=lambda t: SimTaskSide(self, worker, lambda: t.cancelled or not self.alive(worker),
                                                  number))
        self._tasks.append(task)
        return task

    def drive(self, fn: Callable[..., Any], *args: Any, key: str = "driver") -> SimTask:
        """``fn(*args)`` as a task on the driver's machine: a driver's code, whose calls and waits take
        virtual time, runs in one of these."""
        task = SimTask(self.sim, key, fn, args, {},
                       side=lambda t: SimTaskSide(self, self.driver.name, lambda: t.cancelled))
        self._tasks.append(task)
        return task

    def timed(self, network: Any, address: str, number: int = 0) -> TimedNetwork:
        """``network`` as task ``number`` (a replica's index) on machine ``address`` computes with it: each
        gradient holds a core for the cost model's time (drawn, with jitter, from the task's own stream)."""
        rng = np.random.default_rng([self.seed, number])
        return TimedNetwork(network, self.sim, self.machine(address), self.cost, update_floats=self.update_floats,
                            threads=self.threads_per_task, jitter=self.jitter, rng=rng, batch=self.gradients)

    def put(self, value: Any, worker: str) -> Any:
        return value

    def wait(self, futures: list, timeout: float, first: bool = False) -> None:
        """Return once all of ``futures`` (with ``first``: one) are done, or after ``timeout`` virtual seconds."""
        deadline = self.sim.now + timeout
        while self.sim.now < deadline:
            done = [f.done() for f in futures]
            if (any(done) if first else all(done)):
                return
            self.sim.sleep(min(0.001, deadline - self.sim.now))

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for w in self.workers():
            try:
                answers[w] = fn(*args)
            except Exception as e:  # noqa: BLE001 - the answer is the error, as Client.run(on_error="return")
                answers[w] = e
        return answers

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
