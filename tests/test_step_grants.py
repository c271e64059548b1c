"""Issue #48, defect 10, under load: ``--steps 300`` ran 301 on a LocalCluster, because a share worked out
from polled figures reached a replica that had stepped past it. ``StepGrants`` lowers caps before it raises
them, from the caps the replicas' controls answer (never below the steps begun), so the total is never
overrun however late a cap arrives: checked here against replicas that step between every poll and every
cap, and on the in-process runtime with each cap delayed."""

import time

import pytest

import dbkit
from dbkit.downpour.controls import ControlActors
from dbkit.downpour.replica_book import ReplicaBook
from dbkit.downpour.replica_task import ReplicaControl
from dbkit.downpour.step_grants import StepGrants
from dbkit.training.figures import NO_CAP, ReplicaFigures, ReplicaSettings


class Done:
    def __init__(self, value):
        self.value = value

    def result(self, timeout=None):
        return self.value


class Worker:
    """One worker's control, whose replicas each step ``ahead`` times (if their caps let them) before any
    change reaches the control: a driver's figures are always that far behind."""

    def __init__(self, indices, ahead):
        self.control, self.ahead, self.steps = ReplicaControl(), ahead, dict.fromkeys(indices, 0)
        for i in indices:
            self.control.register(i, ReplicaSettings(max_steps=NO_CAP))

    def step_all(self, times):
        for _ in range(times):
            for i in self.steps:
                s = self.control.read(i, self.steps[i])
                if not s.paused and self.steps[i] < s.max_steps:
                    self.steps[i] += 1

    def cap_each(self, caps, epoch):
        self.step_all(self.ahead)
        return Done(self.control.cap_each(caps, epoch))


class Controls(ControlActors):
    def __init__(self, workers):
        super().__init__(cluster=None, tag="t")
        self._actors = {f"w{k}": w for k, w in enumerate(workers)}


def book_of(workers):
    book = ReplicaBook()
    for w in workers:
        for i, n in w.steps.items():
            book.add(i, "w", future=None, figures=ReplicaFigures(i, steps=n, state="running"))
    return book


def poll(book, workers):
    for w in workers:
        for i, n in w.steps.items():
            book.update(i, ReplicaFigures(i, steps=n, state="running"))


@pytest.mark.parametrize("ahead", [0, 1, 3, 17])
def test_caps_lowered_before_raised_never_overrun_the_total_and_reach_it(ahead):
    workers = [Worker([0, 1], ahead), Worker([2], ahead)]
    book = book_of(workers)
    grants = StepGrants(Controls(workers), book)
    total = 100
    for _ in range(200):  # the replicas step, the driver polls (late) and shares, as its monitor would
        for w in workers:
            w.step_all(2)
        poll(book, workers)
        grants.share(total, {0: 1.0, 1: 2.0, 2: 0.5})
        assert sum(sum(w.steps.values()) for w in workers) <= total
        assert sum(grants.caps().values()) <= total
    assert sum(sum(w.steps.values()) for w in workers) == total


def test_a_cap_is_never_set_below_the_steps_a_replica_has_begun():
    control = ReplicaControl()
    control.register(0, ReplicaSettings(max_steps=10))
    assert not control.read(0, 0).paused  # it begins step 1
    control.read(0, 4)  # ... and step 5
    assert control.cap_each({0: 2}, epoch=1) == {0: 5}
    assert control.read(0, 5).max_steps == 5  # it waits there
    assert control.cap_each({0: 8}, epoch=2) == {0: 8}


@pytest.fixture
def late_caps(monkeypatch):
    """Every change of a replica's settings reaches its control 30 ms late (a loaded machine's)."""
    for name in ("set_each", "cap_each"):
        original = getattr(ReplicaControl, name, None)
        if original is None:
            continue

        def late(self, *args, _original=original, **kwargs):
            time.sleep(0.03)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ReplicaControl, name, late)


def test_fit_steps_are_exact_when_every_cap_arrives_late_in_process(late_caps):
    from dbkit.runtime import InProcessCluster

    with InProcessCluster(workers=2) as machines:
        job = dbkit.DownpourSGD("linear", "digits", replicas=3, shards=1, lr=0.05, optimizer="sgd",
                                eval_every=50, slow_replicas=((2, 3.0),), cluster=machines)
        with job:
            job.fit(steps=300, progress=False)
            first = [r.steps for r in job.replicas()]
            job.set(replicas=4)
            job.fit(steps=200, progress=False)
            second = [r.steps for r in job.replicas()]
    assert sum(first) == 300 and sum(second) == 500, (first, second)


def test_a_job_held_with_steps_left_stops_sending_caps(monkeypatch):
    """A fit ended by its seconds leaves steps of its budget: its replicas wait, held, and each poll shares
    the steps left again. That sent a call to every worker at every poll (24 in 3 s with two in-process
    workers); a share that changes no cap now sends nothing. But a held fleet was still shared again every
    0.5 s by its replicas' speeds, which go on changing while they wait (steps over seconds since first seen:
    CI saw 24 calls, not 12). Here one replica is 3x slow and one joins late, so the speeds differ and drift;
    a held fleet is no longer shared again on real machines."""
    from dbkit.runtime import InProcessCluster

    calls = []
    for name in ("set_each", "cap_each"):
        original = getattr(ReplicaControl, name)

        def counted(self, *args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(ReplicaControl, name, counted)
    with InProcessCluster(workers=2) as machines:
        job = dbkit.DownpourSGD("linear", "digits", replicas=3, shards=1, lr=0.05, optimizer="sgd",
                                eval_every=50, slow_replicas={0: 3.0}, cluster=machines)
        with job:
            job.fit(seconds=0.5, progress=False)
            job.set(replicas=4)
            job.fit(steps=10**6, seconds=1.0, progress=False)
            time.sleep(0.5)  # (the first share after the hold: the caps of replicas that stepped as it came)
            before, steps = len(calls), job.snapshot().step
            time.sleep(2.0)  # about 40 polls
            assert len(calls) == before and job.snapshot().step == steps
