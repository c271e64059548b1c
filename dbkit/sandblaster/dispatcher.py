"""Who computes which work unit of a Sandblaster batch (DistBelief Sec. 4.2), independent of where.

"The coordinator assigns each of the N model replicas a small portion of work
... and assigns replicas new portions of load-balancing work as they become
free"; near the end of the batch it "schedules multiple copies of the
outstanding portions and uses the result from whichever model replica
finishes first". ``UnitDispatcher`` holds exactly these rules and nothing
about Dask: the Dask batch (``dbkit.sandblaster.batch``) tells it
which replica is free, which unit finished and which replica was lost, and
sends the assignments it returns. A replica lost mid-batch does not lose its
units: the ones it computed but had not pushed, and the one it was computing,
are handed to the others (``skip`` names the shards that already hold a unit
whose push half-landed).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable

from .records import Assignment, Decisions, LostReplica, Slot, UnitRecord, UnitResult
from .work_units import WorkUnit


class UnitDispatcher:
    """Hands out one batch's work units to replica ``slots``; ``clock`` gives times (a fake one in tests)."""

    def __init__(self, slots: list[Slot], units: list[WorkUnit], backup: bool = True, balance: bool = True,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.slots, self.units = slots, units
        self.backup, self.balance, self.clock = backup, balance, clock
        self.batch = 0
        self.units_done: Counter[int] = Counter()
        self.examples_done: Counter[int] = Counter()
        self.backups_issued = self.backups_won = 0
        self.lost: list[LostReplica] = []
        # which replicas are free, and which running units may be backed up, kept as they change (a scan
        # of every replica at each unit's end cost O(units x replicas) a batch: at 2,000 replicas, most of it)
        self._position = {s.index: k for k, s in enumerate(slots)}
        self._free = {k for k, s in enumerate(slots) if s.alive and s.unit is None}
        self._begin_state()

    def _begin_state(self) -> None:
        self.queue: deque[WorkUnit] = deque()
        self.static: dict[int, deque[WorkUnit]] | None = None
        self.winner: dict[int, int] = {}
        self.losses: dict[int, float] = {}
        self.backed_up: set[int] = set()
        self.started: dict[int, float] = {}
        self.skip: dict[int, frozenset[int]] = {}
        self._timeline: list[list] = []  # [replica, unit, start, end, backup, won]
        self._open: dict[tuple[int, int], list] = {}  # (replica, unit): its copy's record while it runs
        self.redone_at_flush: set[int] = set()  # units a live replica's flush left unpushed, redone once
        self._running: list[tuple[float, int, int]] = []  # heap of (first start, slot position, unit) to back up

    def slot(self, index: int) -> Slot:
        """Replica ``index``'s slot."""
        return self.slots[self._position[index]]

    def live(self) -> list[Slot]:
        return [s for s in self.slots if s.alive]

    def between_batches(self, units: list[WorkUnit] | None = None, backup: bool | None = None,
                        balance: bool | None = None) -> None:
        """New work units, backup copies on or off, balancing on or off: from the next batch on."""
        if units is not None:
            self.units = units
        if backup is not None:
            self.backup = backup
        if balance is not None:
            self.balance = balance

    def forget_in_flight(self) -> None:
        """The batch under way is dropped (a shard was lost): no replica has a unit, a decision or a
        gradient of it any more."""
        for k, slot in enumerate(self.slots):
            slot.unit, slot.unpushed = None, set()
            slot.pending = slot.sent = Decisions()
            if slot.alive:
                self._free.add(k)
        self._running = []

    def add(self, slot: Slot) -> None:
        """Take a new replica from the next batch on (between batches: nothing of it is in flight)."""
        if any(s.index == slot.index for s in self.slots):
            raise ValueError(f"replica {slot.index} is already one of this dispatcher's")
        self._position[slot.index] = len(self.slots)
        if slot.alive and slot.unit is None:
            self._free.add(len(self.slots))
        self.slots.append(slot)

    def retire(self, slot: Slot) -> None:
        """Give replica ``slot`` no more units, between batches (a replica lost mid-batch: ``lose``)."""
        slot.alive = False
        self._free.discard(self._position[slot.index])

    def begin(self) -> int:
        """Start a new batch: every unit is to be done once more. Returns the batch number."""
        if not self.live():
            raise RuntimeError("every Sandblaster replica is lost")
        self.batch += 1
        self._begin_state()
        by_index = {u.index: u for u in self.units}
        self._by_index = by_index
        if self.balance:  # one shared queue
            self.queue.extend(self.units)
        else:  # each replica its own equal share up front; the shared queue only for redone units
            live = self.live()
            self.static = {s.index: deque(u for j, u in enumerate(self.units) if j % len(live) == k)
                           for k, s in enumerate(live)}
        return self.batch

    @property
    def complete(self) -> bool:
        return len(self.winner) == len(self.units)

    @property
    def loss(self) -> float:
        """The batch loss: the winning copies' shares summed."""
        return float(sum(self.losses.values()))

    def assign(self, slot: Slot) -> Assignment | None:
        """The next unit for free replica ``slot`` (a backup copy near the end), or ``None``."""
        if slot.busy or not slot.alive:
            return None
        unit, backup = self._next_unit(slot)
        if unit is None:
            return None
        self.backups_issued += backup
        now = self.clock()
        self.started.setdefault(unit.index, now)
        slot.unit, slot.is_backup = unit, backup
        slot.sent, slot.pending = slot.pending, Decisions()
        position = self._position[slot.index]
        self._free.discard(position)
        if not backup:
            heapq.heappush(self._running, (self.started[unit.index], position, unit.index))
        record = [slot.index, unit.index, now, None, backup, False]
        self._timeline.append(record)
        self._open[(slot.index, unit.index)] = record
        return Assignment(slot.index, unit, self.batch, backup, slot.sent, self.skip.get(unit.index, frozenset()))

    def assign_free(self) -> list[tuple[Slot, Assignment]]:
        """A unit for each free live replica that can have one, in the replicas' order. With one shared
        queue (``balance``), the first free replica that gets nothing ends the round: there is nothing to
        hand out and no copy to back up, for any of them (so a round costs no scan per free replica)."""
        out = []
        for position in sorted(self._free):
            slot = self.slots[position]
            job = self.assign(slot)
            if job is not None:
                out.append((slot, job))
            elif self.balance:
                break
        return out

    def _next_unit(self, slot: Slot) -> tuple[WorkUnit | None, bool]:
        if self.static is not None:
            mine = self.static.get(slot.index, deque())
            while mine and mine[0].index in self.winner:
                mine.popleft()
            if mine:
                return mine.popleft(), False
        while self.queue and self.queue[0].index in self.winner:
            self.queue.popleft()
        if self.queue:
            return self.queue.popleft(), False
        if self.backup and self.balance:
            victim = self._oldest_running()
            if victim is not None:
                self.backed_up.add(victim.index)
                return victim, True
        return None, False

    def _oldest_running(self) -> WorkUnit | None:
        """The running unit, neither backed up nor won, whose first copy started first (of equals, the one on
        the first replica): the one to back up. Entries no longer true are dropped as they come up."""
        while self._running:
            _, position, u = self._running[0]
            slot = self.slots[position]
            if slot.alive and slot.unit is not None and slot.unit.index == u and u not in self.backed_up \
                    and u not in self.winner:
                return slot.unit
            heapq.heappop(self._running)
        return None

    def finished(self, slot: Slot, result: UnitResult) -> None:
        """``slot`` finished a unit: the first copy of a unit to finish wins, later ones are discarded."""
        slot.unit = None
        if slot.alive:
            self._free.add(self._position[slot.index])
        slot.unpushed -= set(result.pushed)
        if result.batch != self.batch:
            return  # a straggling copy from an earlier batch: its work is not needed
        u = result.unit
        won = u not in self.winner
        if won:
            self.winner[u] = slot.index
            self.losses[u] = result.loss
            slot.pending = slot.pending + Decisions(commit=(u,))
            slot.unpushed.add(u)
            self.units_done[slot.index] += 1
            self.examples_done[slot.index] += self._by_index[u].size
            self.backups_won += slot.is_backup
        else:
            slot.pending = slot.pending + Decisions(discard=(u,))
        rec = self._open.pop((slot.index, u), None)  # (a dict, not a scan: a batch may have 10^5 copies)
        if rec is not None:
            rec[3], rec[5] = self.clock(), won

    def lose(self, slot: Slot, reason: str, landed: Callable[[], list[set[int]]]) -> None:
        """Replica ``slot`` is gone: its unit in flight and its committed, unpushed units are done again.

        ``landed()`` gives, per shard, the units already accumulated there; it
        is asked only when something must be redone (a replica may die half-way
        through a push to several shards).
        """
        if not slot.alive:
            return
        slot.alive = False
        self._free.discard(self._position[slot.index])
        self.lost.append(LostReplica(slot.index, self.batch, reason))
        redo = set(slot.unpushed)
        if slot.unit is not None:
            redo.add(slot.unit.index)
            slot.unit = None
        self._hand_back(slot, redo, landed)
        if not self.live():
            raise RuntimeError(f"every Sandblaster replica is lost ({reason})")

    def flush_orders(self) -> dict[int, Decisions]:
        """End of batch: per live replica that has anything to push or apply, the decisions to send.

        The flush may start before the unit in flight has applied the decisions
        it carries: the flush carries them too (applying twice does nothing), or
        the replica would push without them and look lost.
        """
        orders = {}
        for slot in self.live():
            if slot.unpushed or slot.pending:
                decisions, slot.pending = slot.pending, Decisions()
                orders[slot.index] = (slot.sent + decisions) if slot.busy else decisions
        return orders

    def flushed(self, slot: Slot, pushed: Iterable[int] | None, status: str,
                landed: Callable[[], list[set[int]]]) -> bool:
        """The flush of ``slot`` answered with every unit of this batch it has pushed (``None``: it
        failed, and the replica is lost). A flush that answered but left committed units unpushed
        (their gradients were not there) has them done again, once; a second time the replica is
        lost. True if all is pushed."""
        if pushed is not None:
            slot.unpushed -= set(pushed)
        if pushed is None:
            self.lose(slot, f"lost while pushing its gradients (status {status})", landed)
            return False
        if not slot.unpushed:
            return True
        if slot.unpushed & self.redone_at_flush:  # a second time for the same unit: something is wrong
            self.lose(slot, f"its flush twice left units {sorted(slot.unpushed)} unpushed", landed)
            return False
        # it answered, so it is alive: only those units are done again, and its copies no longer count
        for u in self._hand_back(slot, slot.unpushed, landed):
            self.redone_at_flush.add(u)
            self.units_done[slot.index] -= 1
            self.examples_done[slot.index] -= self._by_index[u].size
            won = next((r for r in reversed(self._timeline) if r[0] == slot.index and r[1] == u and r[5]), None)
            if won is not None:  # (rare: a scan is fine)
                won[5] = False
        return False

    def _hand_back(self, slot: Slot, units: set[int], landed: Callable[[], list[set[int]]]) -> list[int]:
        """Put ``units`` of ``slot`` (unpushed, or in flight) back at the head of the queue, each to skip
        the shards that hold it already; returns those handed back. A unit another copy won, or whose push
        landed on every shard, is left alone. Clears ``slot.unpushed``."""
        where_all = landed() if units else []
        handed = []
        for u in sorted(units):
            if self.winner.get(u) not in (None, slot.index):
                continue  # another copy won: nothing of this replica's counts
            where = frozenset(i for i, held in enumerate(where_all) if u in held)
            if where_all and len(where) == len(where_all) and u in self.winner:
                continue  # its push landed everywhere after all
            self.winner.pop(u, None)
            self.losses.pop(u, None)
            self.skip[u] = where
            self.queue.appendleft(self._by_index[u])
            handed.append(u)
        slot.unpushed.clear()
        return handed

    def timeline(self) -> tuple[UnitRecord, ...]:
        """This batch's copies of units so far, in the order they were handed out."""
        return tuple(UnitRecord(r[0], r[1], r[2], r[3], r[4], r[5]) for r in self._timeline)
