"""The simulated grid gives the reports recorded before (``tests/sim_grid.py``): a change made to speed the
simulator up must not change what it simulates. Counts and names are compared exactly, floats to float32's
rounding on another processor (``REL``)."""

import json

import pytest

from .sim_grid import GRID, REL, differences, recorded, run_case

RECORDED = recorded()


@pytest.mark.parametrize("name", sorted(GRID))
def test_the_grid_s_report_is_the_one_recorded(name):
    differ = differences(run_case(name), RECORDED[name])
    assert not differ, f"{name}: {', '.join(differ)} changed (python -m tests.sim_grid --write records anew)"


def test_the_comparison_sees_one_more_push_and_a_figure_moved_past_float32_rounding():
    name = "downpour-n1-here"
    changed = json.loads(json.dumps(RECORDED[name]))
    changed["wall_seconds"] *= 1 + 10 * REL
    changed["replicas"][1]["pushes"] += 1
    changed["events"][-1]["t"] += 1e-4  # (a virtual instant, as a reordered event would move it)
    assert differences(changed, RECORDED[name]) == ["events", "replicas", "wall_seconds"]


def test_the_comparison_forgives_a_float32_rounding_and_nothing_else():
    name = "downpour-n1-here"
    rounded = json.loads(json.dumps(RECORDED[name]))
    rounded["final"]["train_loss"] *= 1 + 2 ** -23  # (one float32 ulp)
    assert differences(rounded, RECORDED[name]) == []
    rounded["history"].append(rounded["history"][-1])  # an extra evaluation: a row more, however alike
    rounded["replicas"][0]["steps"] = float(rounded["replicas"][0]["steps"])  # a count that became a float
    assert differences(rounded, RECORDED[name]) == ["history", "replicas"]
    assert differences(RECORDED[name], json.loads(json.dumps(RECORDED[name]))) == []
