"""The heartbeat (``dbkit.jobs.heartbeat``) on a clock the test turns: a target silent past the timeout is
hung (once); one that answers after a silence shorter than it is late, with how long, and reported per worker
(``WorkerSilent`` in the report's ``faults.workers_silent``); prompt answers are neither."""

from __future__ import annotations

from dbkit.jobs.heartbeat import Heartbeat, Late, late_by_worker, note_late
from dbkit.telemetry import EventStream, WorkerSilent, faults_block


class Call:
    """A ping under way, answered when the test says."""

    def __init__(self) -> None:
        self.answered = False

    def done(self) -> bool:
        return self.answered


class Target:
    def __init__(self) -> None:
        self.calls: list[Call] = []

    def ping(self) -> Call:
        self.calls.append(Call())
        return self.calls[-1]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_late_answer_is_recorded_with_its_silence_and_a_prompt_one_is_not():
    clock, a, b = Clock(), Target(), Target()
    beat = Heartbeat(timeout=10.0, period=1.0, clock=clock)
    assert beat.late == 10.0 / 3
    targets = {0: a, "p": b}
    beat.beat(targets)  # both pinged at 0
    clock.now = 0.5
    a.calls[-1].answered = b.calls[-1].answered = True
    assert beat.beat(targets) == [] and beat.answered_late() == []  # prompt
    clock.now = 2.0
    beat.beat(targets)  # pinged again at 2
    for now in (3.0, 5.0, 8.0):  # silent, for less than the timeout
        clock.now = now
        assert beat.beat(targets) == []
    a.calls[-1].answered = True
    clock.now = 8.5
    assert beat.beat(targets) == []
    assert beat.answered_late() == [Late(0, 6.5)]  # sent at 2, seen answered at 8.5
    assert beat.answered_late() == []  # each once


def test_a_target_silent_past_the_timeout_is_hung_and_its_late_answer_is_not_counted_again():
    clock, a = Clock(), Target()
    beat = Heartbeat(timeout=10.0, period=1.0, clock=clock)
    beat.beat({0: a})
    clock.now = 10.5
    assert beat.beat({0: a}) == [0]
    clock.now = 11.0
    assert beat.beat({0: a}) == []  # hung once
    a.calls[-1].answered = True
    clock.now = 12.0
    beat.beat({0: a})
    assert beat.answered_late() == []  # a hung one was dropped: it is no late answer


def test_late_answers_are_grouped_by_worker_and_reported():
    late = [Late(0, 4.0), Late(1, 6.0), Late("control@w2", 5.0), Late("gone", 9.0)]
    by_worker = late_by_worker(late, {0: "tcp://198.18.0.1:1", 1: "tcp://198.18.0.1:1",
                                      "control@w2": "tcp://198.18.0.3:2"})
    assert by_worker == {"tcp://198.18.0.1:1": (6.0, (0, 1)), "tcp://198.18.0.3:2": (5.0, ())}
    events = EventStream()
    note_late(events, by_worker)
    assert [(e.worker, e.silent, e.shards) for e in events.of(WorkerSilent)] == [
        ("tcp://198.18.0.1:1", 6.0, (0, 1)), ("tcp://198.18.0.3:2", 5.0, ())]
    block = faults_block(events, None)
    assert [w["worker"] for w in block["workers_silent"]] == ["tcp://198.18.0.1:1", "tcp://198.18.0.3:2"]
    assert block["workers_hung"] == [] and block["shards_lost"] == 0
