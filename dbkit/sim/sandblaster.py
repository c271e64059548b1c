"""Sandblaster L-BFGS in virtual time (DistBelief Sec. 4.2): dbkit's own coordinator, dispatcher and replicas.

The coordinator is ``LBFGSCoordinator`` on the driver's machine, sending its
commands (dot, axpy, copy) to real ``ParameterShard`` s and receiving scalars;
each batch gradient is cut into work units that ``UnitDispatcher`` hands to
``SandblasterReplica`` s as they become free, with backup copies near the end
of the batch. A unit's assignment and its result each travel one control
message; the replica's fetch and pushes travel the data network to the shards.
A straggler (``slow_replicas``) is slowed as the real replica slows itself:
each unit waits (factor - 1) times its arithmetic, at least ``MIN_UNIT_SECONDS``,
in virtual time. On a shared layout (``here``: Dask workers of one thread) a
machine runs one unit task at a time, as a worker runs one task.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from typing import Any, cast

import numpy as np

from ..config import RunConfig
from ..nn import Network
from ..ps import ParameterShard, ShardedParameters, balanced_layout
from ..sandblaster.coordinator import LBFGSCoordinator
from ..sandblaster.dispatcher import UnitDispatcher
from ..sandblaster.records import Assignment, Slot, UnitResult
from ..sandblaster.replica import MIN_UNIT_SECONDS, SandblasterReplica
from ..sandblaster.work_units import default_unit_size, make_units
from ..telemetry import BatchDone, ByteCounts, sandblaster_block
from ..training.figures import ReplicaFigures
from .compute import TimedNetwork
from .layout import lay_out
from .run import SimulatedRun
from .shard_service import ShardEnd, ShardService
from .sync import Mailbox, VirtualLock


class SimulatedSandblaster(SimulatedRun):
    """Sandblaster L-BFGS of ``config`` on a simulated ``cluster`` (see ``SimulatedRun``)."""

    algorithm = "sandblaster"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.config
        self.unit_size = c.sandblaster.work_unit_size or default_unit_size(self.data.n_train, c.replicas)
        self.shards: list[ParameterShard] = []
        self.replicas: dict[int, SandblasterReplica] = {}
        self.servers: dict[int, ShardedParameters] = {}
        self.timed: dict[int, TimedNetwork] = {}
        self.dispatcher: UnitDispatcher | None = None
        self.coordinator: LBFGSCoordinator | None = None
        self.batch_seconds: list[float] = []
        self.task_slots: dict[str, VirtualLock] = {}  # a worker's one thread: one unit task at a time
        self._unit_began: dict[int, float] = {}  # each replica's arithmetic seconds when its unit began

    def _launch(self) -> None:
        c, s = self.config, self.config.sandblaster
        self.layout = layout = lay_out(self.cluster, c.shards, coordinator=True)
        shard_layout = balanced_layout(self.network.size, c.shards)
        self.shards = [ParameterShard(i, a, b, self.initial[a:b], "sgd", 1.0)
                       for i, (a, b) in enumerate(shard_layout.ranges)]
        self.services = [ShardService(self.sim, sh, layout.machine(m), layout.network, self.cost,
                                     self.float_scale)
                         for sh, m in zip(self.shards, layout.shard_on)]
        assert layout.coordinator_on is not None
        driver = layout.machine(layout.coordinator_on)
        self.ops = ShardedParameters([ShardEnd(sv, driver) for sv in self.services], shard_layout)
        slow = dict(c.slow_replicas)
        slots = []
        for i in range(c.replicas):
            machine = layout.add_replica(i, 1)[0]
            self.servers[i] = ShardedParameters([ShardEnd(sv, machine) for sv in self.services], shard_layout)
            self.timed[i] = TimedNetwork(self.network, self.sim, machine, self.cost,
                                         threads=self.cluster.spec.machine.threads_per_replica, jitter=self.jitter,
                                         rng=np.random.default_rng([c.seed, i]), batch=self.gradients)
            self.replicas[i] = SandblasterReplica(i, slow_factor=slow.get(i, 1.0), sleep=self._straggle(i),
                                                  lock_factory=partial(VirtualLock, self.sim))
            if layout.shared:
                self.task_slots.setdefault(machine.name, VirtualLock(self.sim))
            slots.append(Slot(i, machine.name))
        self.dispatcher = UnitDispatcher(slots, make_units(self.data.n_train, self.unit_size), s.backup, s.balance,
                                         clock=self.events.now)
        self.coordinator = LBFGSCoordinator(self.ops, self._batch, s.memory, s.iterations, s.gtol, s.ftol,
                                            clock=self.events.now)
        self.results = Mailbox(self.sim)  # finished units, for the coordinator
        self.sim.spawn(self._coordinate, name="coordinator")

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

    def begun(self) -> int:
        return self.progress()

    def configure(self, config: RunConfig) -> None:
        """Stragglers of ``config`` from the next work unit on."""
        slow = dict(config.slow_replicas)
        for i, replica in self.replicas.items():
            replica.set_slow(slow.get(i, 1.0))
        self.config = config.replace(replicas=self.config.replicas)

    def _batch(self, vector: str) -> float:
        """One batch gradient at shard vector ``vector`` by work units (the coordinator's executor): the
        loss, the gradient left in shard vector ``acc``."""
        d = self.dispatcher
        assert d is not None
        began = self.sim.now
        d.begin()
        self.ops.zero("acc")
        while True:
            self._run_units(d, vector)
            if self._flush(d):
                break
        seconds = self.sim.now - began
        self.batch_seconds.append(seconds)
        self.events.emit(BatchDone, batch=d.batch, seconds=seconds, loss=d.loss, units=d.timeline(), lost=())
        return d.loss

    def _run_units(self, d: UnitDispatcher, vector: str) -> None:
        """Hand out units as replicas become free until every unit has a winner. A copy still running then
        (a backup's loser, a straggler) is not waited for: its result comes later and is discarded."""
        idle = deque(s for s in d.live() if not s.busy)  # only a free replica can take a unit: no scan of all
        while not d.complete:
            while idle:
                slot = idle[0]
                if slot.busy or not slot.alive:
                    idle.popleft()
                    continue
                job = d.assign(slot)
                if job is None:  # nothing to hand out now (no unit, no backup): nor to the other idle ones
                    break
                idle.popleft()
                self.sim.spawn(self._unit, slot, job, vector, name=f"unit on replica {slot.index}")
            slot, result = self.results.get()
            d.finished(slot, result)
            idle.append(slot)

    def _straggle(self, i: int) -> Callable[[float], None]:
        """The slowed replica's wait: as ``SandblasterReplica``'s own, from its virtual arithmetic."""
        def wait(_: float) -> None:
            factor = self.replicas[i].slow_factor
            worked = self.timed[i].seconds - self._unit_began.get(i, self.timed[i].seconds)
            self.sim.sleep((factor - 1) * max(worked, MIN_UNIT_SECONDS))
        return wait

    def _unit(self, slot: Slot, job: Assignment, vector: str) -> None:
        """A work unit's round trip: the assignment travels, the replica computes it, the result travels."""
        c, i = self.config, slot.index
        control = self.cost.task_seconds()
        self.sim.sleep(control)
        with self.task_slots.get(slot.worker) or nullcontext():
            self._unit_began[i] = self.timed[i].seconds
            result: UnitResult = self.replicas[i].run_unit(
                self.servers[i], cast(Network, self.timed[i]), self.data.X_train, self.data.y_train, job,
                self.data.n_train, vector, c.sandblaster.push_every)
        self.sim.sleep(control)
        self.results.put((slot, result))

    def _flush(self, d: UnitDispatcher) -> bool:
        """End of batch: every replica with committed units pushes them; True if nothing is left to redo."""
        orders = d.flush_orders()
        tasks = {i: self.sim.spawn(self._flush_one, i, d.batch, decisions, name=f"flush replica {i}")
                 for i, decisions in orders.items()}
        ok = True
        for i, task in tasks.items():
            slot = next(s for s in d.slots if s.index == i)
            ok = d.flushed(slot, task.join(), "finished", lambda: self.ops.landed("acc")) and ok
        return ok and d.complete

    def _flush_one(self, i: int, batch: int, decisions) -> list[int]:
        control = self.cost.task_seconds()
        self.sim.sleep(control)
        worker = self.layout.replica_machines(i)[0].name if self.layout is not None else ""
        with self.task_slots.get(worker) or nullcontext():
            pushed = self.replicas[i].flush(self.servers[i], batch, decisions)
        self.sim.sleep(control)
        return pushed

    # ---- figures -------------------------------------------------------------------------------
    def progress(self) -> int:
        return max(0, len(self.coordinator.rows) - 1) if self.coordinator is not None else 0

    def parameters(self) -> np.ndarray:
        if not self.shards:
            return self.initial.copy()
        return np.concatenate([s.params for s in self.shards])

    def replica_figures(self) -> dict[int, ReplicaFigures]:
        d = self.dispatcher
        if d is None:
            return {}
        running = "running" if self.state == "running" else "stopped"
        out = {}
        for s in d.slots:
            own = self.replicas[s.index].figures()
            out[s.index] = ReplicaFigures(s.index, s.worker, running if s.alive else "lost",
                                          steps=d.units_done[s.index], examples=d.examples_done[s.index],
                                          pushes=own.pushes, fetches=own.fetches,
                                          slow=self.replicas[s.index].slow_factor)
        return out

    def _bytes(self) -> ByteCounts:
        shards, scale = self.shard_figures(), self.float_scale  # cost-only: the stand-in's bytes as the model's
        return ByteCounts(int(sum(s.bytes_fetched for s in shards) * scale),
                          int(sum(s.bytes_pushed for s in shards) * scale))

    def _blocks(self) -> dict:
        return sandblaster_block(self.coordinator, self.dispatcher, self.batch_seconds, self.unit_size)
