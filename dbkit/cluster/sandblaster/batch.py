"""One Sandblaster batch on Dask: work units handed to replicas as they become free,
backup copies near the end, and units of a lost replica handed to the others.

DistBelief Sec. 4.2: "the coordinator assigns each of the N model replicas a
small portion of work ... and assigns replicas new portions of load-balancing
work as they become free"; near the end of the batch it "schedules multiple
copies of the outstanding portions and uses the result from whichever model
replica finishes first".
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field

from concurrent.futures import CancelledError

from distributed import wait as _dask_wait

from ..algorithms.work_units import make_units
from .shards import handles_of
from .work_unit_task import flush, run_unit


def wait(futures, timeout: float, return_when: str = "ALL_COMPLETED") -> None:
    """``distributed.wait`` that returns at the timeout instead of raising."""
    try:
        _dask_wait(futures, timeout=timeout, return_when=return_when)
    except (TimeoutError, CancelledError):  # cancelled: its worker died; the caller looks at each status
        pass


@dataclass
class Slot:
    """A replica as the coordinator sees it."""

    index: int
    worker: str
    state_key: str
    alive: bool = True
    busy: object = None  # the future of its unit in flight
    decisions: dict = field(default_factory=lambda: {"commit": [], "discard": []})
    sent: dict | None = None  # the decisions that went out with the unit in flight (applied when it starts)
    unpushed: set = field(default_factory=set)


class DaskBatch:
    """``evaluate(name) -> loss``, with the batch gradient left in shard vector ``"acc"``."""

    def __init__(self, cluster, network, X, y, server, slots: list[Slot], unit_size: int, push_every: int = 4,
                 backup: bool = True, balance: bool = True) -> None:
        self.cluster, self.network, self.server, self.slots = cluster, network, server, slots
        self.units = make_units(len(y), unit_size)
        self.n_total = len(y)
        self.push_every, self.backup, self.balance = push_every, backup, balance
        self.handles = handles_of(server)
        workers = sorted({s.worker for s in slots})
        client = cluster.client
        self.data = {w: (client.scatter(X, workers=[w], hash=False), client.scatter(y, workers=[w], hash=False))
                     for w in workers}
        self.batch_id = 0
        self.units_done: Counter[int] = Counter()
        self.backups_issued = self.backups_won = 0
        self.batch_seconds: list[float] = []
        self.lost: list[dict] = []
        self._skip: dict[int, set] = {}  # unit -> shards that already hold its gradient

    def live(self) -> list[Slot]:
        return [s for s in self.slots if s.alive]

    def _submit(self, slot: Slot, unit, vector: str) -> None:
        X, y = self.data[slot.worker]
        decisions, slot.decisions = slot.decisions, {"commit": [], "discard": []}
        slot.sent = decisions
        slot.busy = self.cluster.submit_on(
            slot.worker, run_unit, slot.state_key, self.handles, self.network, X, y, unit, self.n_total,
            self.batch_id, vector, decisions, self.push_every, tuple(self._skip.get(unit.index, ())),
            key=f"dbkit-unit-{self.batch_id}-{unit.index}-{slot.index}-{self.cluster.tag}-{time.perf_counter_ns()}")
        slot.unit = unit

    def _check_workers(self, state: dict) -> None:
        alive = set(self.cluster.workers())
        for s in self.live():
            if s.worker not in alive:
                self._lose(s, state, f"worker {s.worker} left the cluster")

    def _lose(self, slot: Slot, state: dict, reason: str) -> None:
        """A lost replica's running unit and its committed-but-unpushed units go back in the queue."""
        slot.alive = False
        self.lost.append({"replica": slot.index, "batch": self.batch_id, "reason": reason})
        redo = set(slot.unpushed)
        if slot.busy is not None:
            redo.add(slot.unit.index)
            slot.busy = None
        landed = self.server.landed("acc") if redo else []  # it may have died half-way through a push
        for u in redo:
            if state["winner"].get(u) not in (None, slot.index):
                continue  # another copy won: nothing of this replica's counts
            where = {i for i, units in enumerate(landed) if u in units}
            if len(where) == len(landed) and u in state["winner"]:
                continue  # its push landed everywhere before the replica died
            state["winner"].pop(u, None)
            state["loss"].pop(u, None)
            self._skip[u] = where
            state["queue"].appendleft(state["by_index"][u])
        slot.unpushed.clear()
        if not self.live():
            raise RuntimeError(f"every Sandblaster replica is lost ({reason})")

    def __call__(self, vector: str) -> float:
        start = time.perf_counter()
        self.batch_id += 1
        self._skip = {}
        self.server.zero("acc")
        by_index = {u.index: u for u in self.units}
        static = {s.index: deque(u for j, u in enumerate(self.units) if j % len(self.live()) == k)
                  for k, s in enumerate(self.live())} if not self.balance else None
        # balanced: one shared queue; static: each replica its own share, the shared queue only for redos
        state = {"queue": deque(self.units if static is None else ()), "winner": {}, "loss": {},
                 "by_index": by_index, "backed_up": set(), "started": {}}
        last_check = time.monotonic()
        while True:
            self._run_units(vector, state, static, last_check)
            if self._flush(state):
                break
        self.batch_seconds.append(time.perf_counter() - start)
        return float(sum(state["loss"].values()))

    def _next_unit(self, slot: Slot, state: dict, static):
        if static is not None:
            q = static.get(slot.index, deque())
            while q and q[0].index in state["winner"]:
                q.popleft()
            if q:
                return q.popleft(), False
            # an owner was lost: its units went to the shared queue
        while state["queue"] and state["queue"][0].index in state["winner"]:
            state["queue"].popleft()
        if state["queue"]:
            return state["queue"].popleft(), False
        if self.backup and self.balance:
            running = [s for s in self.live() if s.busy is not None and s.unit.index not in state["backed_up"]
                       and s.unit.index not in state["winner"]]
            if running:
                victim = min(running, key=lambda s: state["started"].get(s.unit.index, 0.0))
                state["backed_up"].add(victim.unit.index)
                return victim.unit, True
        return None, False

    def _run_units(self, vector: str, state: dict, static, last_check: float) -> None:
        n_units = len(self.units)
        while len(state["winner"]) < n_units:
            for slot in self.live():
                if slot.busy is None:
                    unit, is_backup = self._next_unit(slot, state, static)
                    if unit is not None:
                        self.backups_issued += is_backup
                        state["started"].setdefault(unit.index, time.perf_counter())
                        self._submit(slot, unit, vector)
                        slot.is_backup = is_backup
            busy = [s.busy for s in self.live() if s.busy is not None]
            if busy:
                wait(busy, timeout=0.05, return_when="FIRST_COMPLETED")
            for slot in self.live():
                f = slot.busy
                if f is None or f.status == "pending":
                    continue
                slot.busy = None
                if f.status != "finished":
                    if f.status == "error" and slot.worker in self.cluster.workers():
                        raise RuntimeError(f"work unit on replica {slot.index} failed: {f.exception()!r}")
                    slot.busy = f  # so that _lose re-queues its unit
                    self._lose(slot, state, f"its work unit was {f.status} (worker {slot.worker} lost)")
                    continue
                res = f.result()
                slot.unpushed -= set(res["pushed"])
                if res["batch"] != self.batch_id:
                    continue  # a straggling copy from the last batch: its work is not needed
                u = res["unit"]
                if u not in state["winner"]:
                    state["winner"][u] = slot.index
                    state["loss"][u] = res["loss"]
                    slot.decisions["commit"].append(u)
                    slot.unpushed.add(u)
                    self.units_done[slot.index] += 1
                    self.backups_won += bool(getattr(slot, "is_backup", False))
                else:
                    slot.decisions["discard"].append(u)
            if time.monotonic() - last_check > 0.25:
                last_check = time.monotonic()
                self._check_workers(state)

    def _flush(self, state: dict) -> bool:
        """Push every live replica's committed units; False if a replica was lost meanwhile (redo)."""
        self._check_workers(state)
        futures = {}
        for slot in self.live():
            # A copy still running (its unit was won by another) is not waited for: its result
            # comes back tagged with this batch and is ignored, and the replica gets new work
            # once it is free.
            if slot.unpushed or slot.decisions["commit"] or slot.decisions["discard"]:
                decisions, slot.decisions = slot.decisions, {"commit": [], "discard": []}
                if slot.busy is not None and slot.sent:
                    # The flush may start before the unit in flight has applied the decisions it
                    # carries: the flush carries them too (applying a decision twice does nothing),
                    # or it would push without them and the replica would look lost.
                    decisions = {k: slot.sent[k] + decisions[k] for k in decisions}
                futures[slot.index] = self.cluster.submit_on(
                    slot.worker, flush, slot.state_key, self.handles, self.batch_id, decisions,
                    key=f"dbkit-flush-{self.batch_id}-{slot.index}-{self.cluster.tag}-{time.perf_counter_ns()}")
        deadline = time.monotonic() + 60
        ok = True
        for index, f in futures.items():
            slot = self.slots[index]
            while f.status == "pending" and time.monotonic() < deadline:
                wait([f], timeout=0.25)
                if slot.worker not in self.cluster.workers():
                    break
            if f.status == "finished":
                slot.unpushed -= set(f.result())
            if slot.unpushed or f.status != "finished":
                self._lose(slot, state, f"lost while pushing its gradients (status {f.status})")
                ok = False
        return ok and len(state["winner"]) == len(self.units)
