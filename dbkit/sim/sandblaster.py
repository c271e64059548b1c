"""Sandblaster L-BFGS in virtual time (DistBelief Sec. 4.2): the Sandblaster job's own drivers on simulated machines.

The shards, the replicas' state actors and the batch gradients are placed and
run by the parts that run a Sandblaster job on Dask or in process, through
the runtime protocol in virtual time (``dbkit.runtime.sim.SimSession``):
``start_shards`` places real ``ParameterShard`` s, ``ReplicaActors`` each
replica's ``SandblasterReplica``, and ``UnitBatch`` hands the dispatcher's
work units to the replicas as tasks (``run_unit``, ``flush``), each task one
message to start and one to answer (the profile's ``task_seconds``), with
backup copies near the end of a batch. The coordinator, ``LBFGSCoordinator``,
runs in a driver task and sends its commands (dot, axpy, copy) to the shards.
A straggler (``slow_replicas``) slows itself as the real replica does, on
its task's clock: each unit waits (factor - 1) times its seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import RunConfig
from ..jobs import Gate
from ..ps import ShardedParameters
from ..runtime.shards import start_shards
from ..runtime.sim.layout import lay_out
from ..sandblaster.batch import UnitBatch
from ..sandblaster.changes import batch_done
from ..sandblaster.coordinator import LBFGSCoordinator
from ..sandblaster.dispatcher import UnitDispatcher
from ..sandblaster.replica import SandblasterReplica
from ..sandblaster.replica_actors import ReplicaActors, actor_name
from ..sandblaster.work_units import default_unit_size
from ..telemetry import ByteCounts, sandblaster_block
from ..training.figures import ReplicaFigures
from .run import SimulatedRun

if TYPE_CHECKING:
    from ..runtime.sim import SimSession
    from ..runtime.sim.task import SimTask


class SimulatedSandblaster(SimulatedRun):
    """Sandblaster L-BFGS of ``config`` on a simulated ``cluster`` (see ``SimulatedRun``)."""

    algorithm = "sandblaster"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.config
        self.unit_size = c.sandblaster.work_unit_size or default_unit_size(self.data.n_train, c.replicas)
        self.session: SimSession | None = None
        self.server: ShardedParameters | None = None  # the coordinator's ends of the shards
        self.actors: ReplicaActors | None = None
        self.batch: UnitBatch | None = None
        self.coordinator: LBFGSCoordinator | None = None
        self.gate = Gate()  # (UnitBatch reads whether the job stops; a simulated run stops between iterations)
        self._driver: SimTask | None = None

    def _launch(self) -> None:
        from ..runtime.sim.session import SimSession  # (it imports the simulator, which imports this file)

        c, s, spec = self.config, self.config.sandblaster, self.cluster.spec
        self.layout = layout = lay_out(self.cluster, c.shards, coordinator=True)
        assert layout.coordinator_on is not None
        session = self.session = SimSession(
            self.sim, layout, self.cost, layout.machine(layout.coordinator_on), tag="sim", gradients=self.gradients,
            threads=spec.machine.threads_per_replica, float_scale=self.float_scale, jitter=self.jitter, seed=c.seed)
        shard_workers = [layout.machine(m).name for m in layout.shard_on]
        server = self.server = start_shards(session, self.initial, c.shards, "sgd", 1.0, workers=shard_workers)
        self.services = [end.service for end in server.shards]
        workers = (session.workers() if layout.shared
                   else [layout.new_machine(f"replica{i}").name for i in range(c.replicas)])
        actors = self.actors = ReplicaActors(session, workers, self.events)
        slow = dict(c.slow_replicas)
        slots = [actors.place(i, slow.get(i, 1.0)) for i in range(c.replicas)]
        self.batch = UnitBatch(session, self.network, self.data.X_train, self.data.y_train, server, slots,
                               {sl.index: actors.key(sl.index) for sl in slots}, self.unit_size, s.push_every,
                               s.backup, s.balance, self.gate, on_batch=self._batch_done, clock=self.events.now)
        self.coordinator = LBFGSCoordinator(server, self.batch, s.memory, s.iterations, s.gtol, s.ftol,
                                            clock=self.events.now)
        self._driver = session.drive(self._coordinate, key="coordinator")

    # ---- the coordinator's task ------------------------------------------------------------------
    def _coordinate(self) -> None:
        coordinator = self.coordinator
        assert coordinator is not None
        try:
            coordinator.begin()
            self.sample(evaluate=True)
            while self._may_iterate():
                if coordinator.iterate() is None:
                    self._set_state("finished", coordinator.stop_reason)
                    return
                self.sample(evaluate=True)
        except FloatingPointError as e:
            self._set_state("diverged", str(e))
        except Exception as e:  # noqa: BLE001 - the run ends failed, with its report
            self._set_state("failed", f"{type(e).__name__}: {e}")

    def _may_iterate(self) -> bool:
        """Whether the coordinator begins another iteration (a driven run's cap: it parks at it)."""
        c = self.config
        while True:
            if self.state != "running" or self.stopping:
                return False
            if not self.driven and not ((c.steps is None or self.progress() < c.steps)
                                        and (c.seconds is None or self.sim.now < c.seconds)):
                return False
            if self.progress() < self.cap:
                return True
            self.parking.wait()

    def _batch_done(self, d: UnitDispatcher, seconds: float) -> None:
        batch_done(self.events, d, seconds)

    def begun(self) -> int:
        return self.progress()

    def configure(self, config: RunConfig) -> None:
        """Stragglers of ``config`` from each replica's next work unit on (told to its state object at this
        instant, as ``ReplicaActors.set_slow`` tells a real one)."""
        slow = dict(config.slow_replicas)
        for slot in self.dispatcher.live() if self.batch is not None else []:
            self._replica(slot.index).set_slow(slow.get(slot.index, 1.0))
        self.config = config.replace(replicas=self.config.replicas)

    # ---- figures -------------------------------------------------------------------------------
    @property
    def dispatcher(self) -> UnitDispatcher:
        """Who computed which work units so far (``UnitBatch``'s dispatcher)."""
        if self.batch is None:
            raise RuntimeError("the simulated run has not started")
        return self.batch.dispatcher

    @property
    def batch_seconds(self) -> list[float]:
        return self.batch.batch_seconds if self.batch is not None else []

    @property
    def shards(self) -> list[Any]:
        """The parameter shards themselves (each behind its simulated queue)."""
        return [s.shard for s in self.services]

    def _replica(self, index: int) -> SandblasterReplica:
        assert self.session is not None
        return self.session.peek(actor_name(index))

    def progress(self) -> int:
        return max(0, len(self.coordinator.rows) - 1) if self.coordinator is not None else 0

    def parameters(self) -> np.ndarray:
        if not self.services:
            return self.initial.copy()
        return np.concatenate([s.shard.params for s in self.services])

    def replica_figures(self) -> dict[int, ReplicaFigures]:
        if self.batch is None:
            return {}
        d = self.batch.dispatcher
        running = "running" if self.state == "running" else "stopped"
        out = {}
        for s in d.slots:
            replica = self._replica(s.index)
            own = replica.figures()
            out[s.index] = ReplicaFigures(s.index, s.worker, running if s.alive else "lost",
                                          steps=d.units_done[s.index], examples=d.examples_done[s.index],
                                          pushes=own.pushes, fetches=own.fetches, slow=replica.slow_factor)
        return out

    def _bytes(self) -> ByteCounts:
        shards, scale = self.shard_figures(), self.float_scale  # cost-only: the stand-in's bytes as the model's
        return ByteCounts(int(sum(s.bytes_fetched for s in shards) * scale),
                          int(sum(s.bytes_pushed for s in shards) * scale))

    def _blocks(self) -> dict:
        return sandblaster_block(self.coordinator, self.batch.dispatcher if self.batch is not None else None,
                                 self.batch_seconds, self.unit_size)
