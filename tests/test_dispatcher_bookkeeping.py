"""The dispatcher keeps its free replicas and the units it may back up as they change, instead of looking at
every replica at each unit's end (O(units x replicas) a batch). Held here to the rules stated plainly, as
scans (``Scanning``), over many replicas with ties, stragglers, losses and copies left over from a batch."""

import random

import pytest

from dbkit.sandblaster import Slot, UnitDispatcher, UnitResult, make_units


class Scanning(UnitDispatcher):
    """The rules by a scan of every replica: a unit for each free live replica, in the replicas' order, until
    one gets nothing; the copy to back up is the running unit of this batch, neither backed up nor won, whose
    first copy started first (of equals, the one on the first replica)."""

    def assign(self, slot):
        job = super().assign(slot)
        if job is not None:
            self.batch_of = getattr(self, "batch_of", {})
            self.batch_of[slot.index] = self.batch
        return job

    def assign_free(self):
        out = []
        for slot in self.slots:
            if slot.busy or not slot.alive:
                continue
            job = self.assign(slot)
            if job is not None:
                out.append((slot, job))
            elif self.balance:
                break
        return out

    def _oldest_running(self):
        running = [s for s in self.live() if s.unit is not None and self.batch_of.get(s.index) == self.batch
                   and s.unit.index not in self.backed_up and s.unit.index not in self.winner]
        if not running:
            return None
        return min(running, key=lambda s: self.started[s.unit.index]).unit


def run(cls, seed, replicas=40, n_examples=1500, unit_size=10, batches=3, lose=3):
    """Batches on a fake clock: integer speeds (so many units start and end at one instant), a few
    replicas lost at random instants of the second batch, and the copies still running when a batch
    completes carried into the next (as their tasks are). Returns every assignment made, in order."""
    rng = random.Random(seed)
    now = [0.0]
    slots = [Slot(i) for i in range(replicas)]
    speeds = [rng.choice((1, 1, 2, 3, 10)) for _ in range(replicas)]
    d = cls(slots, make_units(n_examples, unit_size), clock=lambda: now[0])
    running, log = {}, []
    for batch in range(batches):
        d.begin()
        losses = sorted(rng.uniform(0, 30) + now[0] for _ in range(lose)) if batch == 1 else []
        while True:
            while not d.complete:
                for slot, job in d.assign_free():
                    running[slot.index] = (now[0] + max(job.unit.size, 1) * speeds[slot.index], job)
                    log.append((now[0], slot.index, job.unit.index, job.backup, job.batch))
                index, (end, job) = min(running.items(), key=lambda kv: (kv[1][0], kv[0]))
                if losses and losses[0] <= end:
                    now[0] = losses.pop(0)
                    victim = rng.choice([s for s in d.live() if s.index in running] or d.live())
                    running.pop(victim.index, None)
                    d.lose(victim, "killed", lambda: [set(), set()])
                    continue
                now[0] = end
                del running[index]
                d.finished(slots[index], UnitResult(job.unit.index, job.batch, loss=1.0))
            if all([d.flushed(slots[i], sorted(slots[i].unpushed), "finished", lambda: [set(), set()])
                    for i in d.flush_orders()]) and d.complete:
                break
    return log, d


@pytest.mark.parametrize("seed", range(6))
def test_the_kept_free_replicas_and_backups_hand_out_what_a_scan_of_every_replica_does(seed):
    kept, d = run(UnitDispatcher, seed)
    scanned, reference = run(Scanning, seed)
    assert kept == scanned
    assert d.backups_issued == reference.backups_issued > 0  # the backup rule was exercised
    assert len(d.lost) == len(reference.lost) == 3
    assert len({e[2] for e in kept if e[4] == 2}) == len(d.units)  # every unit handed out in the last batch


def test_a_slot_is_found_by_its_replica_index_after_one_joins():
    slots = [Slot(5), Slot(2)]
    d = UnitDispatcher(slots, make_units(40, 10))
    d.add(Slot(9))
    assert [d.slot(i).index for i in (2, 5, 9)] == [2, 5, 9]
    d.begin()
    assert [s.index for s, _ in d.assign_free()] == [5, 2, 9]  # the replicas' order, not their indices'
