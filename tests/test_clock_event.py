"""``Clock.event()``: an event that waits in its clock's time (a thread event on a real clock; in virtual time
between simulated tasks), set by a task, by the loop (a task's end), or before anyone waits."""

import threading

from dbkit.runtime.clock import REAL_TIME
from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.task_side import VirtualTime


def test_a_virtual_event_wakes_its_waiter_at_the_instant_it_is_set_or_at_its_timeout():
    sim = Simulation()
    clock = VirtualTime(sim)
    bell, seen = clock.event(), []

    def waiter():
        seen.append(("by a task", bell.wait(5.0), sim.now))  # set by the other task at 2
        bell.clear()
        seen.append(("by the loop", bell.wait(0.5), sim.now))  # set by the loop at 2.3, before its timeout
        seen.append(("already set", bell.wait(0.5), sim.now))  # returns at once

    def setter():
        sim.sleep(2.0)
        bell.set()

    sim.spawn(waiter)
    sim.spawn(setter)
    sim.at(2.3, bell.set)  # from the loop (as a task's end calls its callbacks): no task to switch from
    sim.run()
    assert seen == [("by a task", True, 2.0), ("by the loop", True, 2.3), ("already set", True, 2.3)]


def test_a_virtual_event_not_set_returns_false_after_its_timeout():
    sim = Simulation()
    bell, seen = VirtualTime(sim).event(), []
    sim.spawn(lambda: seen.append((bell.wait(1.5), sim.now, bell.is_set())))
    sim.run()
    assert seen == [(False, 1.5, False)]


def test_the_real_clock_gives_a_thread_event():
    bell = REAL_TIME.event()
    threading.Timer(0.01, bell.set).start()
    assert bell.wait(5.0) and bell.is_set()
