"""The simulated grid gives the reports recorded before (``tests/sim_grid.py``), bit for bit: a change made
to speed the simulator up must not change what it simulates."""

import json

import pytest

from .sim_grid import GRID, RECORD, differences, run_case

RECORDED = json.loads(RECORD.read_text())


@pytest.mark.parametrize("name", sorted(GRID))
def test_the_grid_s_report_is_the_one_recorded(name):
    differ = differences(run_case(name), RECORDED[name])
    assert not differ, f"{name}: {', '.join(differ)} changed (python -m tests.sim_grid --write records anew)"


def test_the_comparison_sees_the_last_bit_of_one_figure():
    name = "downpour-n1-here"
    changed = json.loads(json.dumps(RECORDED[name]))
    changed["wall_seconds"] = changed["wall_seconds"] * (1 + 2 ** -52)
    changed["replicas"][1]["pushes"] += 1
    assert differences(changed, RECORDED[name]) == ["replicas", "wall_seconds"]
    assert differences(RECORDED[name], json.loads(json.dumps(RECORDED[name]))) == []
