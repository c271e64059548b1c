"""A client's end of a simulated shard, and of any simulated actor: the calls ``dbkit.ps.ShardedParameters``
and the job's drivers make, in virtual time.

``ShardEnd`` has the methods ``ShardedParameters`` calls (``fetch``, ``push``,
``push_fetch``, Sandblaster's vector commands); each sends a ``Request`` to
the shard's queue (``dbkit.runtime.sim.shard_service.ShardService``) across the
simulated network and returns a ``VirtualFuture`` answered when the reply
arrives. So ``ShardedParameters``, ``Pending`` and a replica's ``Exchange``
run unchanged. ``ActorEnd`` is the same end to any actor the session placed
(a control object, a partition), and ``Placed`` what the registry holds for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ...ps.owned_end import OwnedEnd
from .machines import Machine
from .shard_service import Request, ShardService, VirtualFuture

#: the commands that pass over a shard's vector (its named vectors' arithmetic, their checkpoints)
PASSES = frozenset({"dot", "axpy", "scale", "copy", "zero", "load_vectors", "save_vectors"})


class CallCosts(NamedTuple):
    """A call's fixed costs for one message size: its bytes up and down, the client's CPU to send, what the
    shard's service adds (taking the request in and answering it), the client's CPU to take the answer in,
    and the delay before it reaches the shard beyond the NIC (a local call's, or a control message's)."""

    up: int
    down: int
    send: float
    service: float
    take: float
    delay: float



class ShardEnd(OwnedEnd):
    """``client``'s end of ``service``: the calls ``ShardedParameters`` makes, each a ``VirtualFuture``. An
    ``OwnedEnd``: fetched parameters are written into the client's array; ``close`` has nothing to end."""

    def __init__(self, service: ShardService, client: Machine) -> None:
        self.service, self.client = service, client
        self.sim, self.cost = service.sim, service.cost
        self.local = client is service.machine
        self._costs: dict[tuple[int, int, bool], CallCosts] = {}
        self._seconds: dict[tuple[str, str], float] = {}

    # ---- Downpour: the data plane ---------------------------------------------------------------
    def fetch(self, into: np.ndarray | None = None) -> VirtualFuture:
        """``(version, parameters)``; with ``into`` (the shard's size), the parameters are written there when
        the service runs, as a ``WireShard`` receives them (no copy of its own to copy again)."""
        return self._call("fetch", lambda s: s.fetch(into), self._service_seconds("fetch"), 0, self.service.floats)

    def push(self, grad, fetched_version: int, pusher: str | None = None, examples: int = 0,
             first_version: int | None = None) -> VirtualFuture:
        n = self.service.floats
        return self._call("push", lambda s: s.push(grad, fetched_version, pusher, examples, first_version),
                          self._service_seconds("push"), n, 0)

    def push_fetch(self, grad, fetched_version: int, pusher: str | None = None, examples: int = 0,
                   first_version: int | None = None, into: np.ndarray | None = None) -> VirtualFuture:
        """``(answer, version, parameters)``; with ``into``, the parameters are written there."""
        n = self.service.floats
        return self._call("push_fetch", lambda s: s.push_fetch(grad, fetched_version, pusher, examples, first_version,
                                                               into), self._service_seconds("push_fetch"), n, n)

    def _service_seconds(self, kind: str) -> float:
        """A fetch's, push's or push_fetch's service time on this shard under its rule now (worked out once
        per rule: the rule can change while a run goes on)."""
        svc = self.service
        key = (kind, svc.optimizer)
        seconds = self._seconds.get(key)
        if seconds is None:
            n, cost = svc.floats, self.cost
            push, fetch = cost.push_seconds(n, key[1]), cost.fetch_seconds(n)
            seconds = self._seconds[key] = {"fetch": fetch, "push": push, "push_fetch": push + fetch}[kind]
        return seconds

    # ---- Sandblaster: replicas move vectors, the coordinator sends commands ------------------------
    def fetch_vector(self, name: str) -> VirtualFuture:
        n = self.service.floats
        return self._call("fetch_vector", lambda s: s.fetch_vector(name), self.cost.fetch_seconds(n), 0, n)

    def accumulate(self, name: str, values, units: tuple = ()) -> VirtualFuture:
        n = self.service.floats
        return self._call("accumulate", lambda s: s.accumulate(name, values, units), self.cost.vector_seconds(n), n, 0)

    def __getattr__(self, method: str) -> Callable[..., VirtualFuture]:
        """Any other shard method (``vectors``, ``figures``, ``set_lr`` ...) as a command: a small message each
        way and, for a command that passes over a vector (``PASSES``), a pass over the shard's floats."""
        if method.startswith("_"):
            raise AttributeError(method)

        def command(*args: Any, **kwargs: Any) -> VirtualFuture:
            passes = method in PASSES or (method == "vectors" and bool(args) and args[0] in PASSES)
            seconds = (self.cost.vector_seconds(self.service.floats) if passes
                       else self.cost.profile.shard.request_seconds)
            return self._call(method, lambda s: getattr(s, method)(*args, **kwargs), seconds, 0, 0, control=True)

        return command

    def _call(self, kind: str, apply: Callable[[Any], Any], service: float, floats_up: int, floats_down: int,
              control: bool = False) -> VirtualFuture:
        sim, svc = self.sim, self.service
        future = VirtualFuture(sim)
        if sim.observing:  # an observer's read: answered at once, outside virtual time
            try:
                future.settle(apply(svc.shard))
            except Exception as e:  # noqa: BLE001 - the caller's, as a served call's error
                future.settle(error=e)
            return future
        c = self._message_costs(floats_up, floats_down, control)
        request = Request(kind, apply, service + c.service, c.down, self.client, future, control)
        request.client_cpu = c.take
        now = sim.now
        if self.local:  # a shard on the caller's own machine: a call in process, no NIC
            arrival = self.client.reserve(now, c.send) + c.delay
        elif control:
            arrival = now + c.delay
        else:
            sent = self.client.reserve(now, c.send)
            request.switch_seconds = self.cost.profile.machine.switch_seconds
            svc.network.send(sim, sent, self.client, svc.machine, c.up, lambda: svc.arrive(request))
            return future
        if arrival <= now:
            svc.arrive(request)
        else:
            sim.at(arrival - now, lambda: svc.arrive(request))
        return future

    def _message_costs(self, floats_up: int, floats_down: int, control: bool) -> CallCosts:
        """A call's ``CallCosts``, worked out once per message size (the same few sizes every step)."""
        key = (floats_up, floats_down, control)
        costs = self._costs.get(key)
        if costs is None:
            cost, m = self.cost, self.cost.profile.message
            up, down = cost.message_bytes(floats_up), cost.message_bytes(floats_down)
            if self.local:
                send, extra = (0.0 if control else cost.message_cpu(up, "local")), 0.0
                client, delay = (0.0 if control else cost.message_cpu(down, "local")), m.local_call_seconds
            elif control:
                send, extra, client, delay = 0.0, 0.0, 0.0, m.control_seconds
            else:
                send, extra = cost.message_cpu(up, "client"), cost.message_cpu(up, "server") + cost.message_cpu(
                    down, "server")
                client, delay = cost.message_cpu(down, "client"), 0.0
            costs = self._costs[key] = CallCosts(up, down, send, extra, client, delay)
        return costs

class ActorEnd(ShardEnd):
    """One caller's end of a simulated actor (a shard's is a ``ShardEnd``): ``key`` names the actor. A call
    to an actor whose machine died raises ``RuntimeError`` at once, as a Dask actor's does; once served, a
    call tells ``touched`` (the session's: the tasks waiting on that machine look again), if given.
    ``call_seconds``: one way of a call, where it is not a control message's (a partition's: reached as an
    actor even from its own worker, as ``run_replica`` reaches it)."""

    def __init__(self, key: str, service: ShardService, client: Machine, alive: Callable[[str], bool],
                 touched: Callable[[str], None] | None, call_seconds: float | None = None) -> None:
        super().__init__(service, client)
        self.key, self._alive, self._touched, self._call_seconds = key, alive, touched, call_seconds

    def _message_costs(self, floats_up: int, floats_down: int, control: bool) -> CallCosts:
        costs = super()._message_costs(floats_up, floats_down, control)
        if control and self._call_seconds is not None:
            return costs._replace(delay=self._call_seconds)
        return costs

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


class Placed:
    """What the registry holds for a simulated actor: releasing it takes it off its machine (``remove(key)``)."""

    def __init__(self, remove: Callable[[str], None], key: str) -> None:
        self._remove, self.key = remove, key

    def release(self) -> None:
        self._remove(self.key)
