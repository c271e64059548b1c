"""Parameter shards in virtual time: a queue in front of each shard, and each client's end of it.

``ShardService`` puts a shard (a real ``ParameterShard``, or a ``ShardCounter``
in cost-only mode) on a simulated machine. Requests are served one at a
time, first come first served (DistBelief Sec. 4.1: each shard answers on its
own, so many replicas can saturate few shards); a service holds a core of
the shard's machine. The shard's own method runs when its service starts, so
the order of pushes and fetches on each shard, hence staleness and the
parameters themselves, is the order of virtual time.

Each client reaches a shard through its own end of it (``dbkit.runtime.sim.ends.ShardEnd``), whose calls
arrive here as ``Request`` s and are answered through a ``VirtualFuture``.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import greenlet

from .cost import CostModel
from .engine import Simulation
from .machines import Machine, Network, when_free


class VirtualFuture:
    """An answer that arrives at a virtual time: ``done()`` and ``result()``, as a ``concurrent.futures.Future``."""

    __slots__ = ("_sim", "_done", "_value", "_error", "_waiters")

    def __init__(self, sim: Simulation) -> None:
        self._sim = sim
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._waiters: list[greenlet.greenlet] = []

    def done(self) -> bool:
        return self._done

    def result(self, timeout: float | None = None) -> Any:
        """The answer, waiting in virtual time for it (``timeout`` is accepted and not needed: nothing
        is lost in the simulator, so every answer comes)."""
        if not self._done:
            self._waiters.append(greenlet.getcurrent())
            self._sim._suspend()
        if self._error is not None:
            raise self._error
        return self._value

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        self._done, self._value, self._error = True, value, error
        for waiter in self._waiters:
            self._sim.wake(waiter)
        self._waiters.clear()


@dataclass
class Request:
    """One call on a shard: what it does (``apply(shard)``), its service seconds, its reply's bytes."""

    kind: str  # fetch, push, push_fetch, or the command's name
    apply: Callable[[Any], Any]
    service: float
    reply_bytes: int
    client: Machine
    future: VirtualFuture
    control: bool
    client_cpu: float = 0.0  # what taking the reply in costs the client's CPU
    switch_seconds: float = 0.0  # the client process's switch interval, if its reply waits for its interpreter
    arrived: float = 0.0


@dataclass
class ServiceFigures:
    """What a shard's queue saw: requests served, seconds they waited in the queue and were served;
    ``served_by`` and ``waited_by`` per kind of request (fetch, push, push_fetch, a command)."""

    served: int = 0
    waited: float = 0.0
    busy: float = 0.0
    longest_queue: int = 0
    served_by: dict[str, int] = field(default_factory=dict)
    waited_by: dict[str, float] = field(default_factory=dict)
    busy_by: dict[str, float] = field(default_factory=dict)  # seconds of service per kind of request

    def mean_wait(self, kind: str | None = None) -> float:
        """Mean seconds a request (of ``kind``) waited in the queue before its service began."""
        if kind is None:
            return self.waited / max(1, self.served)
        return self.waited_by.get(kind, 0.0) / max(1, self.served_by.get(kind, 0))

    def mean_service(self, kind: str) -> float:
        """Mean seconds of a shard's time that one request of ``kind`` took (its service, messages included)."""
        return self.busy_by.get(kind, 0.0) / max(1, self.served_by.get(kind, 0))


class ShardService:
    """``shard`` on ``machine``, serving requests first come first served, as many at once as the machine has
    cores (a Python shard, one at a time: the ``here`` profile's machines have one core each)."""

    def __init__(self, sim: Simulation, shard: Any, machine: Machine, network: Network, cost: CostModel,
                 float_scale: float = 1.0) -> None:
        self.sim, self.shard, self.machine, self.network, self.cost = sim, shard, machine, network, cost
        self.float_scale = float_scale  # cost-only: the stand-in shard is charged as this many times its size
        self.queue: deque[Request] = deque()
        self.servers = machine.cores.n
        self.in_service = 0
        self.figures = ServiceFigures()

    @property
    def size(self) -> int:
        return int(self.shard.size)

    @functools.cached_property
    def floats(self) -> int:
        """The floats its messages and services are charged for (a shard's size does not change)."""
        return int(round(self.shard.size * self.float_scale))

    @property
    def optimizer(self) -> str:
        return str(self.shard.rule.optimizer)

    def arrive(self, request: Request) -> None:
        """``request`` has reached the shard's machine (now): once its process lets it in (``when_free``),
        served at once or queued."""
        if request.client is not self.machine:
            when_free(self.sim, self.machine, self.cost.profile.machine.switch_seconds, lambda: self._enter(request))
        else:
            self._enter(request)

    def _enter(self, request: Request) -> None:
        request.arrived = self.sim.now
        if self.in_service >= self.servers:
            self.queue.append(request)
            self.figures.longest_queue = max(self.figures.longest_queue, len(self.queue))
        else:
            self._serve(request)

    def _serve(self, request: Request) -> None:
        self.in_service += 1
        now = self.sim.now
        f, kind, waited = self.figures, request.kind, now - request.arrived
        f.served += 1
        f.waited += waited
        f.busy += request.service
        f.served_by[kind] = f.served_by.get(kind, 0) + 1
        f.waited_by[kind] = f.waited_by.get(kind, 0.0) + waited
        f.busy_by[kind] = f.busy_by.get(kind, 0.0) + request.service
        end = self.machine.interleave(now, request.service)
        try:
            value, error = request.apply(self.shard), None
        except Exception as e:  # noqa: BLE001 - the caller gets it, as from a real shard
            value, error = None, e
        if end <= now:
            self._finish(request, value, error)
        else:
            self.sim.at(end - now, lambda: self._finish(request, value, error))

    def _finish(self, request: Request, value: Any, error: BaseException | None) -> None:
        now = self.sim.now
        client, network = request.client, self.network
        if client is self.machine:
            _deliver(self.sim, request, value, error, now + network.local_latency)
        elif request.control:
            _deliver(self.sim, request, value, error, now + self.cost.profile.message.control_seconds)
        else:
            network.send(self.sim, now, self.machine, client, request.reply_bytes,
                         _arrival(self.sim, request, value, error))
        self.in_service -= 1
        if self.queue:
            self._serve(self.queue.popleft())


def _deliver(sim: Simulation, request: Request, value: Any, error: BaseException | None, arrival: float) -> None:
    """The reply reaches its client at ``arrival``; a data reply then costs the client's CPU to take in."""
    if arrival <= sim.now and request.client_cpu <= 0:
        request.future.settle(value, error)
        return
    sim.at(max(0.0, arrival - sim.now), _arrival(sim, request, value, error))


def _arrival(sim: Simulation, request: Request, value: Any, error: BaseException | None) -> Callable[[], None]:
    """What runs when a reply reaches its client: the client takes it in (its CPU, when a thread of it
    gets to run), then the caller's future is settled."""
    cpu = request.client_cpu

    def arrived() -> None:
        when_free(sim, request.client, request.switch_seconds, take)

    def take() -> None:
        done = request.client.interleave(sim.now, cpu)
        if done <= sim.now:
            request.future.settle(value, error)
        else:
            sim.at(done - sim.now, lambda: request.future.settle(value, error))

    return arrived
