"""Downpour SGD of partitioned replicas in virtual time (DistBelief Sec. 3 and 4.1), with a driver of its own.

Each replica is a ``PartitionedDownpourReplica`` of ``DownpourPartition`` s
(or, asked for, a whole ``DownpourReplica``) with the real network, its own data shard and
mini-batches, pushing to real ``ParameterShard`` s through ``ShardEnd`` s whose
answers arrive at virtual times. Staleness, Adagrad's accumulators, warm
start and their effect on the loss are real; only time is modelled. Whole
replicas are driven by the Downpour job's own ``Fleet`` (``dbkit.sim.downpour``);
partitioned ones still by this thin driver, because a partition actor's own calls to its
shards would wait inside a simulated actor's service: it places the parts, runs each replica's loop
as a task, evaluates every ``eval_every`` steps and stops at the budget.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..config import RunConfig
from ..data import shard_indices
from ..downpour.replica import DownpourReplica
from ..downpour.resize import resize
from ..nn import Network
from ..partition import aligned_layout, boundary_floats, inputs_used, ownership
from ..partition.replica import PartitionedDownpourReplica
from ..ps import ParameterShard, ShardedParameters
from ..training.figures import ReplicaFigures
from .compute import TimedNetwork
from .layout import lay_out
from .partition import SimulatedPartition, gather_in_tasks
from .run import SimulatedRun
from .shard_end import ShardEnd
from .shard_service import ShardService


class SimulatedPartitionedDownpour(SimulatedRun):
    """Downpour SGD of ``config``'s partitioned replicas on a simulated ``cluster`` (see ``SimulatedRun``)."""

    algorithm = "downpour"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.config
        self.ownership = ownership(self.network, c.downpour.partitions)
        self.alignment = aligned_layout(self.ownership, c.shards)
        f = boundary_floats(self.ownership)
        self.floats_per_example = f["forward"] + f["backward"]
        self.shards: list[ParameterShard] = []
        self.replicas: dict[int, Any] = {}
        self.timed: dict[int, list[TimedNetwork]] = {}
        self.states: dict[int, str] = {}
        self.errors: dict[int, str] = {}
        self.started = self.done = 0
        self._next_eval = c.eval_every
        self._waiting = list(range(1, c.replicas)) if c.downpour.warm_start_steps > 0 else []
        self._leaving: set[int] = set()  # replicas told to end at their next step (fewer replicas, lost)

    def _launch(self) -> None:
        c = self.config
        self.layout = layout = lay_out(self.cluster, c.shards)
        values = self.alignment.to_server(self.initial)
        self.shards = [ParameterShard(i, a, b, values[a:b], c.optimizer, c.lr)
                       for i, (a, b) in enumerate(self.alignment.layout.ranges)]
        self.services = [ShardService(self.sim, s, layout.machine(m), layout.network, self.cost,
                                     self.float_scale)
                         for s, m in zip(self.shards, layout.shard_on)]
        self.rows = shard_indices(self.data.n_train, c.replicas, seed=c.seed)
        for i in range(c.replicas):
            if i not in self._waiting:
                self._start_replica(i)

    # ---- replicas ------------------------------------------------------------------------------
    def _start_replica(self, i: int) -> None:
        c, net = self.config, self.network
        assert self.layout is not None
        machines = self.layout.add_replica(i, c.downpour.partitions)
        rows = self.rows[i % len(self.rows)]
        X, y = self.data.X_train[rows], self.data.y_train[rows]
        rng = np.random.default_rng([c.seed, i])
        slow = dict(c.slow_replicas).get(i, 1.0)
        replica: Any
        if c.downpour.partitions == 1:
            server = ShardedParameters([ShardEnd(s, machines[0]) for s in self.services], self.alignment.layout,
                                       name=f"replica{i}")
            timed = TimedNetwork(net, self.sim, machines[0], self.cost, update_floats=self.shape.parameters,
                                 threads=self.cluster.spec.machine.threads_per_replica, jitter=self.jitter, rng=rng,
                                 batch=self.gradients)
            self.timed[i] = [timed]
            replica = DownpourReplica(i, cast(Network, timed), X, y, server, c.batch_size, c.downpour.n_fetch,
                                      c.downpour.n_push, c.lr, seed=c.seed + i, max_nonfinite=c.downpour.max_nonfinite,
                                      overlap=c.downpour.overlap)
        else:
            parts = self._partitions(i, machines, X, y)
            self.timed[i] = [p.timed for p in parts]
            replica = PartitionedDownpourReplica(i, parts, c.downpour.n_fetch, c.downpour.n_push, c.lr,
                                                 self.floats_per_example,
                                                 gather=gather_in_tasks(self.sim, self.cost.partition_call_seconds()),
                                                 max_nonfinite=c.downpour.max_nonfinite)
        for t in self.timed[i]:
            t.slow = slow
        self.replicas[i] = replica
        self.states[i] = "running"
        self.sim.spawn(self._loop, i, name=f"replica {i}")

    def _partitions(self, i: int, machines: list, X: np.ndarray, y: np.ndarray) -> list[SimulatedPartition]:
        c, a, own = self.config, self.alignment, self.ownership
        parts = [SimulatedPartition(j, own, self.sim, m, self.layout.network, self.cost,  # type: ignore[union-attr]
                                    threads=self.cluster.spec.machine.threads_per_replica)
                 for j, m in enumerate(machines)]
        for j, p in enumerate(parts):
            p.join(parts)
            server = ShardedParameters([ShardEnd(self.services[s], machines[j]) for s in a.shards_of[j]],
                                       a.partition_layout(j), name=f"replica{i}/partition{j}")
            cols = inputs_used(self.network.layers[0], own.units(0, j))
            p.attach_now(server, list(a.shards_of[j]), X[:, cols], y, c.batch_size, c.seed + i,
                         f"{machines[j].name}", c.downpour.overlap)
        return parts

    def _loop(self, i: int) -> None:
        """One replica's life: step while the budget lasts, then push what it has accumulated."""
        replica = self.replicas[i]
        try:
            while self._may_step(i):
                replica.step()
                self._stepped()
                if replica.diverged:
                    self._ended(i, "diverged", f"{replica.counters.nonfinite_in_a_row} non-finite gradients in a "
                                               f"row (lr={replica.lr})")
                    return
            if self.states[i] == "lost":  # its machine died: what it accumulated is never pushed
                return
            replica.flush()
            self.states[i] = "removed" if i in self._leaving else "stopped"
        except Exception as e:  # noqa: BLE001 - a replica's failure must not stop the others
            self._ended(i, "failed", f"{type(e).__name__}: {e}")
        finally:
            if self.layout is not None:
                self.layout.leave(i)

    def _ended(self, i: int, state: str, error: str) -> None:
        self.states[i], self.errors[i] = state, error
        if all(s in ("diverged", "failed") for s in self.states.values()) and not self._waiting:
            self._set_state("diverged" if state == "diverged" else "failed", f"every replica ended: {error}")

    def _may_step(self, i: int) -> bool:
        """Whether replica ``i`` takes another step: the run goes on, the replica is not leaving, the
        budget (a driven run's cap: at it, the replica parks until the cap moves) allows it."""
        c = self.config
        while True:
            if self.state != "running" or self.stopping or i in self._leaving:
                return False
            if not self.driven and ((c.steps is not None and self.started >= c.steps)
                                    or (c.seconds is not None and self.sim.now >= c.seconds)):
                return False
            if self.started < self.cap:
                self.started += 1
                return True
            self.parking.wait()

    def _stepped(self) -> None:
        c = self.config
        self.done += 1
        if self._waiting and self.done >= c.downpour.warm_start_steps:  # warm start over: the others join
            waiting, self._waiting = self._waiting, []
            for i in waiting:
                self._start_replica(i)
        if self.done >= self._next_eval:
            self._next_eval = self.done + c.eval_every
            self.sample(evaluate=True)

    # ---- steering (a driven run: its job's ``set`` and ``lose_replica``, at the current instant) ------
    def live(self) -> list[int]:
        """Replicas that train or wait to (warm start), not leaving."""
        running = [i for i, s in self.states.items() if s == "running" and i not in self._leaving]
        return sorted(running + self._waiting)

    def set_replicas(self, n: int) -> None:
        """Add replicas (new numbers, on the data shards in turn) or let the newest leave at their next step:
        which ones is the Downpour job's rule (``dbkit.downpour.resize``)."""
        running = [i for i, s in self.states.items() if s == "running" and i not in self._leaving]
        plan = resize(running, self._waiting, self.replicas, n)
        for i in plan.start:
            self._start_replica(i)
        self._waiting += list(plan.hold)  # warm start not over: they join with the others
        self._waiting = [i for i in self._waiting if i not in plan.drop]
        self._leaving.update(plan.stop)
        self.parking.release()  # a leaving replica parked at the cap leaves now
        self.config = self.config.replace(replicas=n)

    def change(self, changes: dict[str, Any], new: RunConfig) -> None:
        """``set(...)``'s ``changes`` (``new``: the config after them) at this instant."""
        if "replicas" in changes:
            self.set_replicas(new.replicas)
        self.configure(new)

    def configure(self, config: RunConfig) -> None:
        """Rates, learning rate, update rule and stragglers of ``config``, from every replica's next step."""
        d, old = config.downpour, self.config
        for replica in self.replicas.values():
            replica.configure(d.n_fetch, d.n_push, config.lr)
        for shard in self.shards:
            if config.lr != old.lr:
                shard.set_lr(config.lr)
            if config.optimizer != old.optimizer:
                shard.set_optimizer(config.optimizer)
        slow = dict(config.slow_replicas)
        for i, timed in self.timed.items():
            for t in timed:
                t.slow = slow.get(i, 1.0)
        self.config = config.replace(replicas=old.replicas)

    def lose(self, i: int) -> None:
        """Replica ``i``'s machine dies: it ends ``lost`` at its next step, its accumulated gradient unpushed."""
        self.states[i], self.errors[i] = "lost", "its machine was lost (lose_replica)"
        self._leaving.add(i)
        self.parking.release()

    def stop(self) -> None:
        """Every replica pushes what it has and ends; the run then has no event left."""
        self._waiting = []
        super().stop()

    def begun(self) -> int:
        return self.started

    # ---- figures -------------------------------------------------------------------------------
    def progress(self) -> int:
        return self.done

    def parameters(self) -> np.ndarray:
        if not self.shards:
            return self.initial.copy()
        return self.alignment.from_server(np.concatenate([s.params for s in self.shards]))

    def replica_figures(self) -> dict[int, ReplicaFigures]:
        assert self.layout is not None or not self.replicas
        out = {}
        for i, r in self.replicas.items():
            state = self.states[i]
            if state == "running" and i in self._leaving:  # told to leave: it trains no more (its last push
                state = "removed"                         # goes when virtual time next runs)
            out[i] = r.figures().but(worker=self.layout.replica_machines(i)[0].name,  # type: ignore[union-attr]
                                     state="running" if state == "running" and self.state == "running" else state,
                                     error=self.errors.get(i), slow=self.timed[i][0].slow)
        return out

    def _blocks(self) -> dict:
        a = self.alignment
        return {"layout": {"partitions": a.partitions, "shards_of_partition": [list(s) for s in a.shards_of],
                           "relayouts": []}}
