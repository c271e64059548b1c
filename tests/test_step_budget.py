"""The step budget's waypoint (where a poll is aimed while a share holds steps back) follows the budget: a new
finite budget sets it, no budget (``aim(inf)``) clears it, so a later fit aims no poll at an old target."""

import math
from types import SimpleNamespace

from dbkit.downpour.step_budget import HELD_BACK, StepBudget


class Fleet:
    """Two live replicas, both running, 10 steps each; the caps asked of it are kept."""

    def __init__(self):
        self.asked = []

    def live(self):
        return [0, 1]

    def figures(self):
        return {i: SimpleNamespace(state="running", steps=10, live=True) for i in (0, 1)}

    def total_steps(self):
        return 20

    def share_caps(self, steps, weights=None, held_back=0):
        self.asked.append(("share", steps, held_back))
        return steps

    def set_caps(self, steps):
        self.asked.append(("set", steps))


def test_a_finite_budget_aims_a_poll_where_the_replicas_will_wait_and_no_budget_aims_none():
    fleet = Fleet()
    budget = StepBudget(fleet, clock=lambda: 0.0)
    budget.aim(100)
    assert budget.waypoint == 100 - HELD_BACK * 2 and fleet.asked == [("share", 80, HELD_BACK * 2)]
    budget.aim(math.inf)
    assert budget.waypoint is None and fleet.asked[-1] == ("set", None)
