"""The replicas of one Downpour job: their tasks, the control actor on each worker, and their book.

Every change to the replicas' settings is numbered (an *epoch*, ``ControlActors``); a replica
echoes the epoch it acted on in its figures, so ``steer`` returns once the
running replicas, not just their control actors, have taken a change.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset, shard_indices
from ..nn import Network
from ..ps.client import CALL_TIMEOUT, resolve
from ..runtime.clock import REAL_TIME
from ..runtime.protocol import Runtime
from ..training.figures import NO_CAP, ReplicaFigures, ReplicaSettings
from .controls import ControlActors
from .placement import Placement
from .replica_book import ReplicaBook
from .replica_kinds import replica_class
from .replica_task import run_replica
from .resize import Resize, resize
from .shares import split
from .step_grants import StepGrants


class Fleet:
    """Starts, steers, watches and stops a Downpour job's replicas.

    ``launching`` (re-entrant) is held while replicas start or stop, so a warm
    start and a change never launch the same replica twice.
    """

    def __init__(self, cluster: Runtime, placement: Placement, network: Network, data: Dataset, config: RunConfig,
                 tag: str) -> None:
        self.cluster, self.placement, self.network, self.data = cluster, placement, network, data
        self.config = config
        self.tag = tag
        self.book = ReplicaBook()
        self.controls = ControlActors(cluster, tag)
        #: on real machines, the caps in force, known exactly (a budget of steps is never overrun); in virtual
        #: time a share reaches its replicas at a known instant, and ``share_caps`` is exact
        self.grants = StepGrants(self.controls, self.book) if cluster.time is REAL_TIME else None
        self.rows = shard_indices(data.n_train, config.replicas, seed=config.seed)  # each replica's data shard
        self.cap = NO_CAP  # total steps at which replicas pause (NO_CAP: none)
        self.paused = False
        self.added: set[int] = set()  # replicas added while the job ran (not at its start)
        self.data_of: dict[int, int] = {}  # replica -> its data shard (a replacement takes the one it replaces)
        self.replaced: dict[int, int] = {}  # ended replica -> the replica that replaced it
        self.crashed: set[int] = set()  # killed by ``crash`` (lose_replica): the lesson's loss, not replaced
        self.machine_lost: set[int] = set()  # lost with a worker (``note_dead_workers``)
        self.left_clocks: set[int] = set()  # ended replicas whose clocks shard 0 was told to drop
        # lock order: after Job._steer, before Job._sample_lock and Placement._lock (replicas started, stopped, polled)
        self.launching = threading.RLock()

    # ---- starting replicas -------------------------------------------------------------------
    def launch_all(self, indices: list[int], data_shards: list[int | None] | None = None) -> list[str]:
        """Start replicas ``indices`` (each whole, or as its partitions), each on its data shard of
        ``data_shards`` (default: its own): every
        control actor is told of its replica first, all at once (one round trip, not one per replica), then
        each replica's task is submitted. Returns their workers."""
        with self.launching:
            told = [self._register(i) for i in indices]
            for _, _, _, reply in told:
                resolve(reply, CALL_TIMEOUT)  # a dead worker's actor never answers
            return [self._submit(i, shard, worker, control, settings)
                    for i, shard, (worker, control, settings, _) in zip(indices, data_shards or [None] * len(indices),
                                                                        told)]

    def _register(self, index: int) -> tuple[str, Any, ReplicaSettings, Any]:
        """Replica ``index``'s worker, its control actor, its settings, and the control's answer to come."""
        c, p = self.config, self.placement
        # a partitioned replica's own task runs beside its partition 0
        worker = p.parts.workers_of(index)[0] if p.partitions > 1 else p.replica_worker(index)
        control = self.controls.on(worker)
        cap = NO_CAP if self.cap == NO_CAP else max(0, self.cap - self.book.total_steps())
        if self.grants is not None and cap != NO_CAP:  # nothing until a share gives it steps no replica holds
            cap = 0
            self.grants.launched(index, cap)
        settings = ReplicaSettings(c.downpour.n_fetch, c.downpour.n_push, c.lr, self.paused, False, cap,
                                   self.controls.epoch, slow=dict(c.slow_replicas).get(index, 1.0),
                                   step_timeout=0.0 if self.cluster.holds_time else c.heartbeat_timeout)
        return worker, control, settings, control.register(index, settings)

    def _submit(self, index: int, data_shard: int | None, worker: str, control: Any,
                settings: ReplicaSettings) -> str:
        """Submit replica ``index``'s task on ``worker`` (its control told of it) and enter it in the book."""
        c, p = self.config, self.placement
        partitioned = p.partitions > 1
        key = f"dbkit-replica-{index}-{self.tag}"
        self.data_of[index] = index % len(self.rows) if data_shard is None else data_shard
        rows = self.rows[self.data_of[index]]
        if partitioned:  # the partitions hold the data and talk to the shards
            placed = p.parts.place(index, p.handles, self.data, rows, c.batch_size, c.seed + index,
                                   c.downpour.overlap)
            future = self.cluster.submit_on(worker, run_replica, index, str(control.key), None, None, None, None,
                                            c.batch_size, c.seed + index, c.downpour.max_nonfinite,
                                            partitions=placed.handles, floats_per_example=p.parts.floats_per_example,
                                            wired=placed.wired, key=key)
        else:
            loop = replica_class(c.downpour.replica)
            future = self.cluster.submit_on(
                worker, run_replica, index, str(control.key), self.network, self.data.X_train[rows],
                self.data.y_train[rows], p.handles(), c.batch_size, c.seed + index, c.downpour.max_nonfinite,
                overlap=c.downpour.overlap, loop=loop, knobs=c.replica_settings(),
                coordinator=p.coordinator_for(loop.coordinator_name), key=key)
        s = settings  # its figures until it publishes its own
        self.book.add(index, worker, future, ReplicaFigures(index, n_fetch=s.n_fetch, n_push=s.n_push, lr=s.lr,
                                                            slow=s.slow, epoch=s.epoch))
        return worker

    def use(self, config: RunConfig) -> None:
        """Replicas launched from now on start with ``config``'s settings."""
        with self.launching:
            self.config = config

    def start(self, replicas: int, warm_start: bool, paused: bool = False) -> None:
        """Launch the job's first replicas (``paused``: they wait to be resumed): all of them, or with
        ``warm_start`` only replica 0 (the others wait for ``warm_start`` to launch them)."""
        with self.launching:
            self.paused = paused
            first = 1 if warm_start else replicas
            self.launch_all(list(range(first)))
            self.book.hold_for_warm_start(list(range(first, replicas)))

    def add(self, k: int) -> list[int]:
        """Launch ``k`` more replicas now, with new numbers (after a re-layout: as many as it stopped)."""
        with self.launching:
            new = [self.book.next_index() + j for j in range(k)]
            self.launch_all(new)
        return new

    def relaunch(self, ended: list[int]) -> list[tuple[int, int]]:
        """Replace each replica of ``ended`` by a new one on its data shard, on a live worker (the
        placement has forgotten the dead ones); returns ``(old, new)`` pairs."""
        with self.launching:
            first = self.book.next_index()
            pairs = [(old, first + k) for k, old in enumerate(ended)]
            self.launch_all([new for _, new in pairs], [self.data_of.get(old) for old in ended])
            self.replaced.update(pairs)
        return pairs

    def note_dead_workers(self, alive: set[str]) -> None:
        """Count as lost with a machine every replica that ended lost, or failed, while its worker or a
        partition's is not in ``alive`` (``ReplicaBook.lost_with_dead_workers``)."""
        self.machine_lost.update(self.book.lost_with_dead_workers(alive))

    def lost_unreplaced(self) -> list[int]:
        """Replicas lost with a worker and not yet replaced (a task that failed on a live worker is not
        started again: it would fail again)."""
        return sorted(i for i in self.machine_lost if i not in self.replaced and i not in self.crashed)

    def resize(self, n: int, state: str = "removed", wait: bool = True) -> Resize:
        """Start, hold back for the warm start, or stop replicas so that ``n`` are live; which ones is
        ``resize.py``'s rule, the simulator's too. Those stopped end as ``state`` (with ``wait``, before this
        returns; else at their next step)."""
        with self.launching:
            waiting = self.book.waiting_for_warm_start()
            plan = resize(self.book.live(), waiting, self.book.figures(), n)
            self.launch_all(list(plan.start))
            if plan.hold:
                self.book.hold_for_warm_start(waiting + list(plan.hold))
            self.book.drop_waiting(len(plan.drop))
            if plan.stop:
                self.stop(list(plan.stop), state, wait=wait)
            self.added.update(plan.start + plan.hold)
        return plan

    def warm_start(self, steps: int) -> list[int]:
        """Launch the replicas waiting for the warm start once replica 0 has done ``steps`` steps
        (or has ended). Returns those launched."""
        if not self.book.waiting_for_warm_start():
            return []
        first = self.book.figures().get(0)
        if first is not None and first.live and first.steps < steps:
            return []
        with self.launching:
            waiting = self.book.waiting_for_warm_start()
            self.launch_all(waiting)
        return waiting

    # ---- steering ----------------------------------------------------------------------------
    def steer(self, indices: list[int] | None = None, wait: float = 10.0, **changes: Any) -> None:
        """Change ``ReplicaSettings`` fields of replicas ``indices`` (all if None); with ``wait``, return
        once each of them has acted on it (or ended), at most ``wait`` seconds."""
        if indices is None and "paused" in changes:
            self.paused = bool(changes["paused"])  # replicas launched from now on start so too
        epoch = self.controls.tell(lambda ctl, epoch: ctl.set(indices, epoch=epoch, **changes))
        if wait:
            self.wait_for(lambda f: f.epoch >= epoch, indices, wait)

    def wait_for(self, done: Any, indices: list[int] | None, timeout: float) -> bool:
        """Poll until ``done(figures)`` holds for every live replica of ``indices``; False at the timeout."""
        clock = self.cluster.time  # virtual seconds on a simulated cluster
        deadline = clock.now() + timeout
        while True:
            self.poll()
            figures = self.book.figures()
            targets = [i for i in (self.book.live() if indices is None else indices) if figures[i].live]
            if all(done(figures[i]) for i in targets):
                return True
            if clock.now() > deadline:
                return False
            clock.sleep(0.005)

    def set_caps(self, steps: int | None) -> int | None:
        """Cap each live replica at its steps + ``steps`` (exact with one replica); returns the total to reach."""
        with self.launching:
            if steps is None:
                self.cap = NO_CAP
                if self.grants is not None:
                    self.grants.forget()
                self.steer(max_steps=NO_CAP, wait=0)
                return None
            figures = self.book.figures()
            self.cap = self.book.total_steps() + steps
            caps = {i: {"max_steps": figures[i].steps + steps} for i in self.book.live()}
            self.controls.tell(lambda ctl, epoch: ctl.set_each(caps, epoch))  # one call per worker
            return self.cap

    def share_caps(self, steps: int, weights: dict[int, float] | None = None, held_back: int = 0) -> int:
        """Cap the live replicas so that together they take ``steps`` more steps from their figures as last
        polled, less ``held_back`` for later, in shares by ``weights`` (their speeds; default equal): exact
        unless a replica stepped past its share before the cap reached it (``StepBudget`` holds back what
        running replicas may take meanwhile). Returns the total to reach."""
        with self.launching:
            figures, live = self.book.figures(), self.book.live()
            self.cap = self.book.total_steps() + steps
            shares = split(max(0, steps - held_back), [max(0.0, (weights or {}).get(i, 1.0)) for i in live])
            caps = {i: {"max_steps": figures[i].steps + s} for i, s in zip(live, shares)}
            self.controls.tell(lambda ctl, epoch: ctl.set_each(caps, epoch))
            return self.cap

    def share_exactly(self, total: int, weights: dict[int, float] | None = None) -> None:
        """Cap the live replicas so that all replicas together never take more than ``total`` steps, and take
        it exactly once all reach their caps, each toward its share by ``weights`` (``StepGrants``; real
        machines only)."""
        assert self.grants is not None
        with self.launching:
            self.cap = total
            self.grants.share(total, weights)

    def set_slow(self, factors: dict[int, float], wait: float = 10.0) -> None:
        """Slow each live replica by its factor in ``factors`` (1 for the others); with ``wait``, returns once
        they act on it (at most ``wait`` seconds)."""
        with self.launching:
            slow = {i: {"slow": float(factors.get(i, 1.0))} for i in self.book.live()}
            epoch = self.controls.tell(lambda ctl, epoch: ctl.set_each(slow, epoch))
        if wait:
            self.wait_for(lambda f: f.epoch >= epoch, list(slow), wait)

    def crash(self, index: int, timeout: float = 10.0) -> None:
        """Kill replica ``index``'s task as its machine's death would: it ends as ``lost`` at once, its
        accumulated gradient never pushed (the others train on)."""
        with self.launching:
            self.crashed.add(index)
            self.steer([index], crash=True, wait=timeout)  # returns once it has acted: then it is lost
            if self.book.figures()[index].live:
                self.book.mark_lost(index, "its task was killed (lose_replica)")

    def hold(self, paused: bool) -> None:
        """Pause every replica (returning once all have pushed and paused) or let them go on."""
        with self.launching:
            self.steer(paused=paused, wait=0)
        if paused:
            epoch = self.controls.epoch
            self.wait_for(lambda f: f.epoch >= epoch and f.state != "running", None, 30.0)

    def stop(self, indices: list[int], state: str, timeout: float = 60.0, wait: bool = True) -> None:
        """Stop replicas ``indices`` (they push what they accumulated); they end as ``state``. With ``wait``,
        return once they have (else they are no longer live now, and end at their next step)."""
        with self.launching:
            self.book.leave(indices, state)
            self.steer(indices, stop=True, wait=0)
            if wait:
                self.book.wait(indices, timeout=timeout, state=state, clock=self.cluster.time, refresh=self._refresh())
                self.placement.parts.release(indices)

    def stop_all(self, timeout: float = 60.0) -> None:
        with self.launching:
            self.steer(stop=True, wait=0)
            self.book.wait_all(timeout, clock=self.cluster.time, refresh=self._refresh())

    def _refresh(self) -> Any:
        """What a wait for replicas to end polls their figures with, on real machines (``ReplicaBook.wait``):
        a replica given up on while its step hung says so there. None in virtual time."""
        return None if self.cluster.holds_time else (lambda: self.poll(settle=False))

    # ---- watching ----------------------------------------------------------------------------
    def poll(self, settle: bool = True) -> None:
        """Take every worker's replica figures; a worker is lost only when its control actor is
        reported lost, or does not answer and the scheduler no longer lists it. With ``settle``,
        replicas whose tasks ended take their final figures."""
        pending = []
        for worker, ctl in self.controls.items():
            try:
                pending.append((worker, ctl.latest()))
            except RuntimeError as e:  # "Worker holding Actor was lost"
                self._lose_worker(worker, f"worker {worker} lost ({e})")
        for worker, p in pending:
            try:
                for index, figures in p.result(timeout=2).items():
                    self.book.update(int(index), figures)
            except Exception as e:  # noqa: BLE001
                if worker not in self.cluster.workers():  # asked only when a worker does not answer
                    self._lose_worker(worker, f"worker {worker} lost ({type(e).__name__})")
        if settle:
            self.book.settle_futures()
        self._drop_ended_clocks()

    def _drop_ended_clocks(self) -> None:
        """A replica that ended without leaving (lost, failed, diverged) must not hold the others back: loops
        that wait for the slowest (``dbkit.after.ssp``) would wait for it for ever."""
        if replica_class(self.config.downpour.replica).coordinator_name is None:  # nobody waits for anybody
            return
        ended = {i for i, e in self.book.entries.items() if not e.live} - self.left_clocks
        if ended:
            self.placement.forget_replicas(sorted(ended))
            self.left_clocks |= ended

    def _lose_worker(self, worker: str, reason: str) -> None:
        for index in self.book.live():
            if self.book.worker_of(index) == worker:
                self.book.mark_lost(index, reason)
        self.controls.forget(worker)

    def release_ended_partitions(self) -> None:
        """Drop the partition actors of replicas whose tasks ended (on their own, or told to leave): their
        partners would otherwise keep their data and parameter blocks until the job stops."""
        for i in self.placement.parts.replicas():
            if i in self.book.entries and not self.book.entries[i].running:
                self.placement.parts.release([i], abort=f"replica {i} {self.book.state_of(i)}")

    def figures(self) -> dict[int, ReplicaFigures]:
        return self.book.figures()

    def live(self) -> list[int]:
        """Replicas running or paused."""
        return self.book.live()

    def known(self) -> set[int]:
        """Replicas started (in any state) or waiting for the warm start."""
        return set(self.book.figures()) | set(self.book.waiting_for_warm_start())

    def total_steps(self) -> int:
        return self.book.total_steps()

    def all_ended(self) -> list[ReplicaFigures]:
        """The replicas that ended on their own (diverged, failed, lost) if none is left, else []."""
        if self.book.live_count() or not self.book.entries:
            return []
        return [f for f in self.book.figures().values() if f.state in ("diverged", "failed", "lost")]

    def release(self) -> None:
        """Cancel every replica task and forget the control actors (their Futures keep them alive)."""
        self.book.cancel_all()
        self.controls.release()


def batch_figures(config: RunConfig, n_train: int, rows: list[np.ndarray] | None) -> dict:
    """A report's ``batch``: the batch size asked, and the smallest and largest a replica's step computes
    with its data shard of ``rows`` (fewer where a shard holds fewer examples, as many replicas on a small
    training set do: ``shrunk``; ``None``: no replica placed yet, the size asked)."""
    asked = config.batch_size
    sizes = [min(asked, len(r)) for r in rows] if rows else [asked]
    return {"asked": asked, "smallest": min(sizes), "largest": max(sizes), "shrunk": min(sizes) < asked,
            "examples_per_replica": n_train // max(1, config.replicas)}
