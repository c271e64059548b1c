"""Downpour SGD in virtual time (DistBelief Sec. 4.1): the Downpour job's own drivers on simulated machines.

The replicas are started, steered, resized and stopped by the ``Fleet`` and
``Placement`` that run a job on Dask or in process, through the runtime
protocol in virtual time (``dbkit.runtime.sim.SimSession``): each replica is
its ``run_replica`` task (a ``DownpourReplica`` with the real network, its own
data shard and mini-batches, reading its ``ReplicaControl``), each shard a
real ``ParameterShard`` behind a queue, each message and gradient a virtual
time. Staleness, Adagrad's accumulators, warm start and their effect on the
loss are real; only time is modelled.

A driver task does what a job's monitor thread does, in virtual time: it
polls the fleet, evaluates every ``eval_every`` steps, warm-starts the other
replicas, ends the run when its budget is spent (steps, seconds, a target
accuracy; a job's cap, shared among the replicas so that the total is exact)
and carries out the job's changes (``apply_change``) at the instant they are
asked. A partitioned replica's partitions are placed by the job's ``PartitionPlacement``: on each
partition's machine the real ``DownpourPartition`` (``dbkit.partition.simulated``), its layers' arithmetic timed
there, its boundary slices on the network, each call to it served in a task of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..config import RunConfig
from ..downpour.changes import apply_change
from ..downpour.fleet import Fleet
from ..downpour.placement import Placement
from ..downpour.step_budget import StepBudget
from ..partition import Ownership
from ..partition.actors import PartitionActor
from ..partition.simulated import SimulatedPartitionActor
from ..runtime.sim.layout import lay_out
from ..runtime.sim.machines import Machine
from ..runtime.sim.poll_timer import PollTimer
from ..runtime.sim.sync import Mailbox
from ..training.figures import ReplicaFigures
from .run import SimulatedRun

if TYPE_CHECKING:
    from ..runtime.sim import SimSession
    from ..runtime.sim.task import SimTask

class _Command:
    """A change the job asks for, carried out by the driver's task."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None

    def carry_out(self) -> None:
        try:
            self.value = self.fn()
        except Exception as e:  # noqa: BLE001 - the job's to raise
            self.error = e
        self.done = True


class SimulatedDownpour(SimulatedRun):
    """Downpour SGD of ``config`` (whole replicas) on a simulated ``cluster`` (see ``SimulatedRun``)."""

    algorithm = "downpour"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.session: SimSession | None = None
        self.placement: Placement | None = None
        self.fleet: Fleet | None = None
        self.mailbox = Mailbox(self.sim)
        self._driver: SimTask | None = None
        self.budget: StepBudget | None = None  # the steps the replicas may reach (a job's fit, a run's steps)
        self.polls = PollTimer(self.driven)
        self._total = 0  # steps as last polled
        self._next_eval = self.config.eval_every
        self._over = False

    # ---- placing ----------------------------------------------------------------------------------
    def _launch(self) -> None:
        from ..runtime.sim.session import SimSession  # (it imports the simulator, which imports this file)

        c, spec = self.config, self.cluster.spec
        self.layout = layout = lay_out(self.cluster, c.shards, coordinator=True)
        assert layout.coordinator_on is not None
        session = self.session = SimSession(
            self.sim, layout, self.cost, layout.machine(layout.coordinator_on), tag="sim", gradients=self.gradients,
            update_floats=self.shape.parameters, threads=spec.machine.threads_per_replica,
            float_scale=self.float_scale, jitter=self.jitter, seed=c.seed)
        session.stand_in(PartitionActor, self._partition)
        shard_workers = [layout.machine(m).name for m in layout.shard_on]
        replica_workers = session.workers() if layout.shared else self._machines_of_their_own(0, c.replicas)
        self.placement = Placement(session, self.network, c, shard_workers, replica_workers)
        self.placement.place_shards(self.initial, c.rule(), c.shard_lr())
        assert self.placement.server is not None
        self.services = [end.service for end in self.placement.server.shards]
        self.fleet = Fleet(session, self.placement, self.network, self.data, c, tag="sim")
        self.budget = StepBudget(self.fleet, lambda: self.sim.now)
        self._driver = session.drive(self._drive)

    def _machines_of_their_own(self, first: int, end: int) -> list[str]:
        """A machine for each of replicas ``first`` .. ``end - 1``, for each partition of a partitioned one (a
        profile whose parts each have one; ``PartitionPlacement`` then puts replica i's partitions on its own)."""
        assert self.layout is not None
        k = self.config.downpour.partitions
        return [self.layout.new_machine(f"replica{i}" + (f"/partition{j}" if k > 1 else "")).name
                for i in range(first, end) for j in range(k)]

    def _partition(self, machine: Machine, index: int, ownership: Ownership) -> SimulatedPartitionActor:
        """What the session places for a ``PartitionActor``: the real partition, timed on ``machine``."""
        assert self.session is not None and self.layout is not None
        return SimulatedPartitionActor(index, ownership, self.sim, machine, self.layout.network, self.cost,
                                       self.session.actor, threads=self.cluster.spec.machine.threads_per_replica)

    # ---- the driver's task ------------------------------------------------------------------------
    def _drive(self) -> None:
        """Start the replicas, then poll, evaluate, warm-start, keep the budget and carry out the job's
        changes until the run is over; then every replica pushes what it holds and ends."""
        c, fleet, budget = self.config, self.fleet, self.budget
        assert fleet is not None and budget is not None
        if not self.driven and c.steps is not None:
            budget.aim(c.steps)
        while self.mailbox.items:  # what the job asked before the replicas start (its first fit's cap)
            self.mailbox.get().carry_out()
        fleet.start(c.replicas, warm_start=c.downpour.warm_start_steps > 0)
        budget.share()
        while True:
            command = self.mailbox.get_within(self._next_poll())
            if command is not None:
                command.carry_out()
            if self._over:
                break
            self._watch()
            if self._over:
                break
            if self.resting:  # at the job's cap: virtual time stands still until the job moves it
                self.sim.halt()
        fleet.stop_all()
        self._total = fleet.total_steps()

    def _watch(self) -> None:
        """One poll, as a job's monitor tick: figures, warm start, the end of the replicas, evaluation, the
        run's own budget, and the budget's shares."""
        c, fleet, budget = self.config, self.fleet, self.budget
        assert fleet is not None and budget is not None
        fleet.poll()
        fleet.release_ended_partitions()
        total = self._total = fleet.total_steps()
        now = self.sim.now
        self.polls.polled(now, total, len(fleet.live()))
        if fleet.warm_start(c.downpour.warm_start_steps):
            budget.share()
        ended = fleet.all_ended()
        if ended:
            state = "diverged" if any(f.state == "diverged" for f in ended) else "failed"
            self._set_state(state, f"every replica ended: {ended[-1].error}")
        elif total >= self._next_eval:
            self._next_eval = total + c.eval_every
            self.sample(evaluate=True)
        if not self.driven and ((c.steps is not None and total >= c.steps)
                                or (c.seconds is not None and now >= c.seconds)):
            self._over = True
        if self.state != "running":  # finished at its target accuracy, diverged, failed
            self._over = True
        else:
            budget.review(total)

    def _next_poll(self) -> float:
        """Virtual seconds to the next poll (``PollTimer``): its targets are the next evaluation, the warm
        start's end and the budget, and a run on its own stops polling at its seconds."""
        c, budget = self.config, self.budget
        assert budget is not None
        targets = [float(self._next_eval)]
        if self.fleet is not None and self.fleet.book.waiting_for_warm_start():
            targets.append(c.downpour.warm_start_steps)
        left = c.seconds - self.sim.now if not self.driven and c.seconds is not None else math.inf
        live = len(self.fleet.live()) if self.fleet is not None else 0
        return self.polls.next(self._total, targets, budget.cap, live, left)

    def _command(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` carried out by the driver's task at this instant, the simulation running until it is
        done (a change's control messages take virtual time); its value, or its error raised here."""
        if self._driver is None or self._driver.done():
            raise RuntimeError("the simulated run is not running: nothing to change")
        command = _Command(fn)
        self.mailbox.put(command)
        self.sim.run_while(lambda: not command.done)
        if not command.done:
            raise RuntimeError("the simulation ended before the change was made")
        if command.error is not None:
            raise command.error
        return command.value

    # ---- steering (a driven run: its job's ``set``, ``fit`` and ``lose_replica``) ------------------
    @property
    def resting(self) -> bool:
        return self.driven and self.budget is not None and self._total >= self.budget.cap

    def set_cap(self, cap: float) -> None:
        """The replicas may go on to ``cap`` steps in all (``math.inf``: no cap), shared among them."""
        self.cap = cap
        if self._driver is None:
            return

        def move() -> None:
            assert self.fleet is not None and self.budget is not None
            if self.fleet.live():
                self.fleet.poll()
            self._total = self.fleet.total_steps()
            self.budget.aim(cap)

        self._command(move)

    def begun(self) -> int:
        return self._total

    def _holding(self) -> bool:
        """The replicas wait (at the job's cap, or paused): a change reaches them at this instant."""
        return self.resting or (self.fleet is not None and self.fleet.paused)

    def live(self) -> list[int]:
        """Replicas that train or wait to (warm start)."""
        if self.fleet is None:
            return []
        return sorted(self.fleet.live() + self.fleet.book.waiting_for_warm_start())

    def change(self, changes: dict[str, Any], new: RunConfig) -> None:
        """``set(...)``'s ``changes`` applied by the Downpour job's own rule (``apply_change``): rates,
        learning rate, update rule, stragglers, replicas (``new``: the config after them)."""
        old = self.config

        def apply() -> None:
            assert self.fleet is not None and self.placement is not None and self.layout is not None
            if "replicas" in changes and not self.layout.shared:  # a machine for each new replica
                first = len(self.placement.replica_workers) // new.downpour.partitions
                wanted = self.fleet.book.next_index() + max(0, new.replicas - len(self.live()))
                self.placement.add_replica_workers(self._machines_of_their_own(first, wanted))
            # running replicas act on new rates at their next step: the simulated job answers once their
            # controls hold them (waiting for 200 replicas' next steps takes this machine most of a second);
            # resting, they act at this instant, and the job answers once they have
            apply_change(changes, old, new, self.fleet, self.placement, acted=10.0 if self._holding() else 0.0)
            assert self.budget is not None
            self.budget.share()

        self._command(apply)
        self.config = new

    def lose(self, i: int) -> None:
        """Replica ``i``'s machine dies: it ends ``lost`` at its next step, its accumulated gradient unpushed."""
        self._command(lambda: self.fleet.crash(i) if self.fleet is not None else None)

    def stop(self) -> None:
        """Every replica pushes what it has and ends; the run then has no event left."""
        self.stopping = True
        if self._driver is not None and not self._driver.done():
            self.mailbox.put(_Command(self._end))

    def _end(self) -> None:
        self._over = True

    # ---- figures ----------------------------------------------------------------------------------
    def progress(self) -> int:
        return self._total

    def parameters(self) -> np.ndarray:
        if self.placement is None:
            return self.initial.copy()
        return self.placement.alignment.from_server(np.concatenate([s.shard.params for s in self.services]))

    @property
    def shards(self) -> list[Any]:
        """The parameter shards themselves (each behind its simulated queue)."""
        return [s.shard for s in self.services]

    def replica_figures(self) -> dict[int, ReplicaFigures]:
        return self.fleet.figures() if self.fleet is not None else {}

    def _blocks(self) -> dict:
        a = self.placement.alignment if self.placement is not None else None
        return {"layout": {"partitions": self.config.downpour.partitions,
                           "shards_of_partition": [list(s) for s in a.shards_of] if a else [], "relayouts": []}}


def simulated_downpour(config: RunConfig, *args: Any, **kwargs: Any) -> SimulatedRun:
    """The simulated Downpour run of ``config`` (whole or partitioned replicas)."""
    return SimulatedDownpour(config, *args, **kwargs)
