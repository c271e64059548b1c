"""``--seeds K``: a simulated setting over K seeds with jittered computation times, and each figure's spread,
checked against the same runs made one by one."""

import dataclasses
import json
import statistics
import subprocess
import sys

import pytest

from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run
from dbkit.sim.seeds import over_seeds
from dbkit.telemetry import validate_report

CFG = RunConfig.make(algorithm="downpour", model="linear", replicas=4, shards=2, steps=120, eval_every=60, seed=5)


def test_the_spread_is_that_of_the_runs_made_one_by_one():
    swept = over_seeds(CFG, Cluster("here"), 3)
    jittered = dataclasses.replace(Cluster("here"), jitter="exponential")
    alone = [simulated_run(CFG.replace(seed=s), jittered).run() for s in (5, 6, 7)]
    rows = swept["seeds"]["runs"]
    assert [r["seed"] for r in rows] == [5, 6, 7] and swept["seeds"]["count"] == 3
    assert [r["examples_per_second"] for r in rows] == [a["examples_per_second"] for a in alone]
    eps = swept["seeds"]["spread"]["examples_per_second"]
    values = [a["examples_per_second"] for a in alone]
    assert eps["mean"] == pytest.approx(statistics.fmean(values)) and eps["sd"] == pytest.approx(
        statistics.stdev(values))
    assert eps["low"] == min(values) < eps["high"] == max(values)  # jitter: the seeds do differ
    assert swept["examples_per_second"] == alone[0]["examples_per_second"] and validate_report(swept) == []


def test_one_seed_gives_no_spread():
    with pytest.raises(ValueError, match="seeds must be at least 2"):
        over_seeds(CFG, Cluster("here"), 1)


def test_the_command_line_prints_the_spread_and_writes_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dbkit", "simulate", "downpour", "--replicas", "4", "--steps", "120",
                          "--seeds", "2", "--cost-only", "--report", str(tmp_path / "r.json"), "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "over 2 seeds, computation times jittered" in out.stdout and "test accuracy" not in out.stdout
    r = json.loads((tmp_path / "r.json").read_text())
    assert set(r["seeds"]["spread"]) == {"examples_per_second", "virtual_seconds"}  # cost-only: no accuracy
