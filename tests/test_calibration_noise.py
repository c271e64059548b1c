"""``dbkit calibrate`` stands behind its profile or writes none: a probe timed before and after says whether the
machine was steady; noisy timings are refused in one line (``--force``: written with a warning every
simulation repeats); steady ones write the profile as measured; ``here`` is replaced only when asked."""

import dataclasses
import json

import numpy as np
import pytest

from dbkit.calibration import noise
from dbkit.calibration.noise import CPU_SHARE, DRIFT, SPREAD, Noise, Probe
from dbkit.cli.main import main
from dbkit.runtime.sim.profile import noise_warning
from dbkit.sim import load_profile

STEADY = Probe([1e-3 * (1 + 0.01 * np.sin(k)) for k in range(200)], 0.99)
SPREAD_OUT = Probe([1e-3 * (1 + 2.0 * (k % 3 == 0)) for k in range(200)], 0.97)  # a third of the runs: 3x longer
SHARED = Probe(STEADY.times, 0.3)  # steady times, but the process had the CPU 30% of the time


def test_the_noise_of_steady_spread_and_drifting_timings():
    assert Noise.of(STEADY, STEADY, load=0.1).problem() is None
    spread = Noise.of(STEADY, SPREAD_OUT, load=9.8)
    assert spread.spread == pytest.approx(2.0, rel=0.01) and spread.spread > SPREAD
    assert "spread 200%" in spread.problem() and "load 9.8" in spread.problem()
    drifted = Noise.of(STEADY, Probe([2 * t for t in STEADY.times], 1.0), load=0.0)
    assert drifted.drift == pytest.approx(1.0, rel=0.01) and drifted.drift > DRIFT and "moved 100%" in drifted.problem()


    shared = Noise.of(STEADY, SHARED, load=6.0)
    assert shared.cpu_share == 0.3 < CPU_SHARE and "other processes took 70% of its time" in shared.problem()


def test_the_probe_times_its_work_and_sees_the_cpu_it_did_not_get():
    import time

    calls = []
    busy = noise.probe(lambda: calls.append(1), seconds=0.05)
    assert len(busy.times) >= 20 and len(calls) == len(busy.times) + 1 and busy.cpu_share > 0.5
    asleep = noise.probe(lambda: time.sleep(0.002), seconds=0.05)  # off the CPU, as if others had it
    assert asleep.cpu_share < 0.5


@pytest.fixture
def rig(monkeypatch, tmp_path):
    """``dbkit calibrate`` with its measurements stood in for (the shipped profile), the probe's timings given:
    ``rig(before, after)`` runs the command line and returns its status, what it printed and wrote."""
    import dbkit.calibration.calibrate as measuring
    import dbkit.calibration.control_plane as control_plane

    shipped = load_profile("here")
    monkeypatch.setenv("DBKIT_PROFILES", str(tmp_path / "profiles"))
    monkeypatch.setattr(control_plane, "time_control_plane", lambda quick: ({}, {}, 0.0, {}))
    monkeypatch.setattr(measuring, "calibrate", lambda *a, **k: shipped)

    def run(before, after, *flags, capsys=None):
        probes = iter([before, after])
        monkeypatch.setattr(noise, "probe", lambda *a, **k: next(probes))
        status = main(["calibrate", *flags])
        return status, sorted((tmp_path / "profiles").glob("*.json")) if (tmp_path / "profiles").exists() else []

    run.shipped = shipped
    return run


def test_steady_timings_write_the_profile_as_measured_to_a_file_of_its_own(rig, capsys):
    status, written = rig(STEADY, STEADY)
    assert status == 0 and len(written) == 1 and written[0].name.startswith("here-")  # 'here' left alone
    got = load_profile(str(written[0]))
    assert got.measured["noise"]["trusted"] is True
    assert dataclasses.replace(got, measured={k: v for k, v in got.measured.items() if k != "noise"}) == rig.shipped
    assert noise_warning(got) is None and "--replace-here makes it" in capsys.readouterr().out


def test_replace_here_makes_it_the_here_profile(rig, tmp_path):
    status, written = rig(STEADY, STEADY, "--replace-here")
    assert status == 0 and [p.name for p in written] == ["here.json"]
    assert load_profile("here").measured["noise"]["trusted"] is True  # (DBKIT_PROFILES: this test's folder)


def test_noisy_timings_are_refused_in_one_line_and_nothing_is_written(rig, tmp_path, capsys):
    out = tmp_path / "mine.json"
    status, written = rig(STEADY, SPREAD_OUT, "--out", str(out), "--replace-here")
    err = capsys.readouterr().err.strip()
    assert status == 1 and not out.exists() and written == []
    assert len(err.splitlines()) == 1 and "too busy to measure" in err and "--force" in err


def test_force_writes_a_noisy_profile_with_a_warning_the_simulator_repeats(rig, tmp_path, capsys):
    out = tmp_path / "mine.json"
    status, _ = rig(STEADY, SPREAD_OUT, "--out", str(out), "--force")
    assert status == 0 and out.exists()
    assert "measured on a busy machine" in capsys.readouterr().err
    d = json.loads(out.read_text())
    assert d["measured"]["noise"]["trusted"] is False and d["measured"]["noise"]["spread"] > SPREAD
    assert main(["simulate", "downpour", "--steps", "20", "--replicas", "2", "--profile", str(out), "--quiet"]) == 0
    assert "measured on a busy machine" in capsys.readouterr().err
