"""A job's session on a simulated cluster: the runtime protocol in virtual time, with the thread that runs it.

``dbkit.sim.Cluster(...).session(tag, network=..., config=...)`` opens one, as
``InProcessCluster`` does, and ``DownpourSGD`` runs on it as itself: its
drivers' work goes through ``call`` (a task at the current simulated instant),
its monitor and heartbeat through ``every`` (tasks that sleep in virtual
time), a pause through ``hold`` (virtual time stands still), a ``fit``'s seconds
through ``stop_time_at`` and its step target through ``rest``. The machines, the
cost model and the shards behind their queues are ``SimSession``'s. Whatever a
simulated session places instead of a class whose methods wait (a partition)
is registered in ``STAND_INS`` by the module that writes it
(``dbkit.partition.simulated``), so that the runtime imports no algorithm.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ..every import every_loop
from .busy import Busy
from .compute import GradientBatch
from .cost import CostModel
from .layout import lay_out
from .session import SimSession
from .shape import ModelShape
from .shard_service import ShardService
from .simulated import Simulated
from .time_driver import TimeDriver

if TYPE_CHECKING:
    from .layout import Cluster

T = TypeVar("T")

#: what a simulated session places where a class is asked for: ``make(session, machine, *args, **kwargs)``
STAND_INS: dict[type, Callable[..., Any]] = {}


class _Loop:
    """``body(owner)`` as a task that sleeps in virtual time the seconds it returns; ``halt`` ends it."""

    def __init__(self, session: JobSession, owner: Any, body: Callable[[Any], float | None], name: str,
                 on_error: Callable[[Any, BaseException], None] | None) -> None:
        self._owner, self._body, self._on_error, self.halted = weakref.ref(owner), body, on_error, False
        self.name, self._sim = name, session.sim
        session.time_driver.call(lambda: session.drive(self._run, key=name), as_task=False)

    def _run(self) -> None:
        sim = self._sim
        every_loop(self._owner, self._body, self._on_error, lambda: self.halted, lambda w: sim.sleep(max(w, 1e-6)))

    def halt(self, join: bool = True, timeout: float = 30.0) -> None:
        self.halted = True


class JobSession(SimSession):
    """One job (``network``, ``config``) on ``cluster``'s simulated machines; see the module docstring."""

    def __init__(self, cluster: Cluster, network: Any, config: Any, tag: str = "") -> None:
        self.cluster = cluster
        self.time_driver = TimeDriver()
        assert self.time_driver.sim is not None
        spec = cluster.spec
        shape = cluster.shape or ModelShape.of(network)
        shape = ModelShape.named(shape) if isinstance(shape, str) else shape
        layout = lay_out(cluster, config.shards, coordinator=True)
        assert layout.coordinator_on is not None
        #: a cost-only run's stand-in network is charged as ``shape``: each shard as that many times its size
        self.bytes_scale = shape.parameters / network.size if cluster.cost_only else 1.0
        super().__init__(self.time_driver.sim, layout, CostModel(spec, shape), layout.machine(layout.coordinator_on),
                         tag, gradients=GradientBatch() if cluster.stack_gradients and not cluster.cost_only else None,
                         update_floats=shape.parameters, threads=spec.machine.threads_per_replica,
                         float_scale=self.bytes_scale, jitter=cluster.jitter, seed=config.seed)
        self.shape, self.stand_in_name = shape, network.name
        self.accuracy_known = not cluster.cost_only  # a stand-in's accuracy says nothing of the costed model
        self.time_driver.run_task = lambda fn: self.drive(fn, key=f"dbkit-call-{self.tag}")
        for cls, make in STAND_INS.items():
            self.stand_in(cls, functools.partial(make, self))

    # ---- the job's loops and time ----------------------------------------------------------------
    def every(self, owner: Any, body: Callable[[Any], float | None], name: str,
              on_error: Callable[[Any, BaseException], None] | None = None) -> _Loop:
        return _Loop(self, owner, body, name, on_error)

    def call(self, fn: Callable[[], T]) -> T:
        self._raise_broken()
        return self.time_driver.call(fn)

    def computing(self, network: Any) -> Any:
        """Each gradient of ``network`` holds a core of the driver's machine for the cost model's time."""
        return self.timed(network, self.driver.name)

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()`` as an observer outside the simulation: its calls answered at once, in no virtual time."""
        return self.time_driver.read(fn)

    holds_time = True  # a paused job is held where it is: its replicas need not be told

    def hold(self, held: bool) -> None:
        """Virtual time stands still while held."""
        self.time_driver.hold(held)

    def stop_time_at(self, seconds: float | None) -> None:
        self.time_driver.stop_at(seconds)

    def rest(self) -> None:
        self.time_driver.hold(True)

    def resting(self) -> bool:
        return self.time_driver.held

    def lost(self, grace: float = 2.0) -> str | None:
        """The simulation itself broke (a task's error escaped it): the job fails, saying why."""
        error = self.time_driver.error
        return None if error is None else f"the simulation: {type(error).__name__}: {error}"

    def _raise_broken(self) -> None:
        why = self.lost()
        if why is not None:
            raise RuntimeError(why)

    # ---- places ----------------------------------------------------------------------------------
    def shard_places(self, shards: int) -> list[str] | None:
        return [self.layout.machine(m).name for m in self.layout.shard_on]

    def replica_places(self, first: int, end: int, partitions: int) -> list[str] | None:
        """Shared machines: the driver spreads replicas over them; else a machine of its own for each part."""
        if self.layout.shared:
            return None
        return [self.layout.new_machine(f"replica{i}" + (f"/partition{j}" if partitions > 1 else "")).name
                for i in range(first, end) for j in range(partitions)]

    # ---- what it says ----------------------------------------------------------------------------
    def simulation(self) -> Simulated:
        spec = self.cluster.spec
        return Simulated(spec.name, self.cluster.machines or spec.machine.machines or None, self.cluster.describe(),
                         self.sim.now, self.time_driver.real_seconds)

    def report_fields(self) -> dict[str, Any]:
        """``simulated``, the profile, and the ``simulation`` block: machines, shard queues, virtual and real
        seconds (read between two slices)."""
        return self.time_driver.read(self._fields)

    def shard_services(self) -> list[ShardService]:
        """Each parameter shard behind its simulated queue, in shard order."""
        return [self.shard_queues[i] for i in sorted(self.shard_queues)]

    def _fields(self) -> dict[str, Any]:
        spec, now = self.cluster.spec, self.sim.now
        queues = self.shard_services()
        block = {
            "profile": spec.name, "profile_description": spec.description, "virtual_seconds": now, "start": 0.0,
            "real_seconds": self.time_driver.real_seconds, "events": self.sim.events,
            "stacked_gradients": self.gradients.stacked if self.gradients else 0,
            "model_shape": {"name": self.shape.name, "parameters": self.shape.parameters},
            "machines": [{"name": m.name, "roles": m.roles, "cores": m.cores.n,
                          "utilisation": round(m.utilisation(now), 4), "link_busy": round(m.link_busy(now), 4),
                          "bytes_sent": m.bytes_sent,
                          "bytes_received": m.bytes_received} for m in self.layout.machines],
            "shard_queues": [{"shard": s.shard.index, "served": s.figures.served, "servers": s.servers,
                              "utilisation": round(s.figures.busy / now, 4) if now > 0 else 0.0,
                              "busy": round(s.figures.busy / (now * s.servers), 4) if now > 0 else 0.0,
                              "link_busy": round(s.machine.link_busy(now), 4),
                              "mean_wait": s.figures.mean_wait(), "served_by": dict(s.figures.served_by),
                              "mean_wait_by": {k: s.figures.mean_wait(k) for k in s.figures.served_by},
                              "mean_service_by": {k: s.figures.mean_service(k) for k in s.figures.served_by},
                              "longest_queue": s.figures.longest_queue} for s in queues],
            "busy": Busy.of(self.layout.machines, queues, now).to_dict(),
        }
        fields: dict[str, Any] = {"simulated": True, "profile": spec.name, "simulation": block,
                                  "cost_only": self.cluster.cost_only}
        if self.cluster.cost_only:  # the model charged, and the stand-in that ran
            fields["model"] = {"name": self.shape.name, "parameters": self.shape.parameters,
                               "layers": [layer.kind for layer in self.shape.layers], "stand_in": self.stand_in_name}
        return fields


    def close(self) -> None:
        """Release everything, then end the thread (its tasks are ended on it)."""
        if not self.closed:
            try:
                self.time_driver.call(super().close, timeout=30.0, as_task=False)
            except Exception:  # noqa: BLE001 - the thread ends either way
                pass
        self.time_driver.stop()

    def __repr__(self) -> str:
        return f"<simulated job session {self.tag} on {self.cluster.describe()}>"
