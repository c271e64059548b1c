"""``dbkit simulate`` and ``dbkit calibrate`` on the command line; profiles and sizes refused in one line."""

import json
import os
import subprocess
import sys

import pytest

from dbkit.runtime.sim.memory import check_memory
from dbkit.runtime.sim.profile import write
from dbkit.sim import ProfileError, load_profile
from dbkit.telemetry import validate_report

PNG = b"\x89PNG\r\n\x1a\n"


def dbkit(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dbkit", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_simulate_downpour_writes_the_report_of_a_real_run_marked_simulated(tmp_path):
    out = dbkit("simulate", "downpour", "--replicas", "6", "--shards", "2", "--steps", "300", "--report",
                str(tmp_path / "r.json"), "--plot", str(tmp_path / "p.png"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert validate_report(report) == [] and report["simulated"] is True and report["profile"] == "here"
    assert report["steps"] == 300 and len(report["replicas"]) == 6
    assert "simulated on profile here" in out.stdout and "virtual" in out.stdout
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG


def test_simulate_fig3_writes_its_report_and_png_with_the_paper_beside(tmp_path):
    out = dbkit("simulate", "fig3", "--report", str(tmp_path / "f.json"), "--plot", str(tmp_path / "f.png"))
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "f.json").read_text())
    assert r["figure"] == "fig3" and r["profile"] == "distbelief-2012" and r["simulated"] is True
    for m in r["models"].values():
        assert set(m) >= {"parameters", "connectivity", "machines", "speedup"}
        assert len(m["machines"]) == len(m["speedup"]) and m["speedup"][0] == 1.0
    assert "paper: 2.2x at 8 machines" in out.stdout and "simulated (distbelief-2012 profile)" in out.stdout
    assert (tmp_path / "f.png").read_bytes()[:8] == PNG


@pytest.mark.parametrize("flag", [["--scheduler", "tcp://127.0.0.1:1"], ["--checkpoint-dir", "x"]])
def test_simulate_refuses_what_needs_a_real_cluster(flag):
    out = dbkit("simulate", "downpour", "--steps", "10", *flag)
    assert out.returncode == 2 and "does not apply to a simulation" in out.stderr


@pytest.mark.parametrize("change,field", [
    (lambda d: d["machine"].pop("bandwidth"), "machine.bandwidth"),
    (lambda d: d["compute"].update(dense_flops_per_second=0), "compute.dense_flops_per_second"),
    (lambda d: d["shard"].update(request_seconds=-1), "shard.request_seconds"),
    (lambda d: d["machine"].update(cores=2.5), "machine.cores"),
    (lambda d: d["message"].update(nonsense=1), "message.nonsense"),
])
def test_a_bad_profile_is_refused_in_one_line_naming_its_field(tmp_path, change, field):
    d = load_profile("distbelief-2012").to_dict()
    change(d)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    with pytest.raises(ProfileError, match=field.replace(".", r"\.")):
        load_profile(str(path))
    out = dbkit("simulate", "downpour", "--steps", "10", "--profile", str(path))
    assert out.returncode == 2 and field in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_malformed_or_missing_profile_file_is_refused(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProfileError, match="not valid JSON"):
        load_profile(str(tmp_path / "bad.json"))
    with pytest.raises(ProfileError, match="not a named profile"):
        load_profile("distbelief-1999")


def test_a_profile_written_reads_back_the_same(tmp_path):
    p = load_profile("here")
    assert load_profile(str(write(p, tmp_path / "here.json"))) == p


def test_numerics_that_would_not_fit_are_refused_with_the_size_and_cost_only_advice():
    with pytest.raises(ValueError, match=r"GiB.*--cost-only"):
        check_memory(1_700_000_000, 200, "downpour", available=24 * 2**30)
    check_memory(10_000, 200, "downpour", available=24 * 2**30)  # a small model fits
    out = dbkit("simulate", "downpour", "--shape", "image-1.7b", "--replicas", "200", "--steps", "10",
                "--profile", "distbelief-2012")
    assert out.returncode == 2 and "--cost-only" in out.stderr


def test_cost_only_on_the_command_line_runs_a_billion_parameters(tmp_path):
    out = dbkit("simulate", "downpour", "--cost-only", "--shape", "image-1.7b", "--replicas", "8", "--shards", "8",
                "--steps", "16", "--profile", "distbelief-2012", "--report", str(tmp_path / "r.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    r = json.loads((tmp_path / "r.json").read_text())
    assert r["cost_only"] is True and r["model"]["parameters"] > 1.7e9 and r["final"]["test_accuracy"] is None
    assert "cost-only" in out.stdout


def test_cost_only_sandblaster_charges_the_model_s_bytes():
    from dbkit.config import RunConfig
    from dbkit.sim import Cluster, simulate

    cfg = RunConfig.make(algorithm="sandblaster", model="linear", replicas=4, shards=2, steps=2, eval_every=1)
    report = simulate(cfg, Cluster("distbelief-2012"), shape="speech-42m", cost_only=True)
    assert report["cost_only"] and report["bytes"]["fetched"] >= 4 * 41_777_152 * 4  # every replica fetched it all


@pytest.mark.cluster
def test_calibrate_quick_writes_a_profile_the_simulator_reads(tmp_path):
    folder = tmp_path / "profiles"
    # --force: a CI machine busy with the tests before may be too noisy; the noise gate is tested on its own
    out = dbkit("calibrate", "--quick", "--out", str(tmp_path / "p.json"), "--replace-here", "--force",
                env={"DBKIT_PROFILES": str(folder)}, timeout=600)
    assert out.returncode == 0, out.stderr
    p = load_profile(str(tmp_path / "p.json"))
    assert p.name == "here" and p.machine.machines == 2 and p.measured["wire_cpu"]
    assert p.measured["noise"]["spread"] >= 0 and "the probe's times spread" in out.stdout
    assert (folder / "here.json").exists()  # and it is the 'here' profile from now on
    assert "mlp:9610" in p.measured["gradients"] and p.measured["fit"]["real"]["1"] > 0


@pytest.mark.parametrize("n", [1, 16])
def test_the_calibration_fit_s_cost_only_steps_take_the_virtual_time_steps_with_numbers_take(n):
    """``dbkit calibrate`` fits the rig's costs to real steps by simulating one replica many times; it does
    so cost-only (ten times sooner). Virtual time does not depend on the numbers: the same step time."""
    from dbkit.calibration.fit import simulated_step

    here = load_profile("distbelief-2012")
    with_numbers = simulated_step(here, n, 120, cost_only=False)
    assert with_numbers > 0 and simulated_step(here, n, 120, cost_only=True) == with_numbers


def test_progress_lines_say_the_budget_and_the_accuracy_only_where_known():
    from dbkit.sim.figures.ticker import Ticker

    lines = []
    Ticker(lines.append, "downpour", None, every=0.0)(0.25, float("nan"))  # a cost-only run of steps
    Ticker(lines.append, "sandblaster", 2.0, every=0.0)(0.5, 0.91)
    assert lines[0].startswith("  downpour: 0.250 simulated s (") and "accuracy" not in lines[0]
    assert lines[1].startswith("  sandblaster: 0.500 of 2 simulated s, test accuracy 0.910 (")


def test_simulate_help_lists_only_what_a_simulation_takes():
    out = dbkit("simulate", "downpour", "--help")
    assert out.returncode == 0
    for flag in ("--scheduler", "--checkpoint-dir", "--transport", "--runtime", "--resume", "--heartbeat-timeout",
                 "--workers", "--no-restart-replicas", "--checkpoint-every"):
        assert flag not in out.stdout, flag
    for flag in ("--profile", "--machines", "--cost-only", "--replicas", "--n-push", "--report", "--quiet"):
        assert flag in out.stdout, flag
    assert "--scheduler" in dbkit("run", "downpour", "--help").stdout  # a real run still lists it


@pytest.mark.parametrize("flag", [["--runtime", "in-process"], ["--transport", "actor"],
                                  ["--checkpoint-every", "3"]])
def test_a_real_cluster_flag_left_out_of_the_help_is_still_refused_by_name(flag):
    out = dbkit("simulate", "downpour", "--steps", "10", *flag)
    assert out.returncode == 2 and f"{flag[0]} does not apply to a simulation" in out.stderr


def test_quiet_prints_only_the_summary_and_many_replicas_are_summarised(tmp_path):
    args = ("simulate", "downpour", "--replicas", "30", "--shards", "2", "--steps", "90", "--report",
            str(tmp_path / "r.json"))
    quiet = dbkit(*args, "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.strip().splitlines()
    assert lines[0].startswith("simulated on profile here") and lines[-1].startswith("report:")
    assert not any(line.lstrip().startswith(("replica", "shard", "30 replicas", "simulated cluster"))
                   for line in lines) and len(lines) <= 8
    loud = dbkit(*args)
    assert loud.returncode == 0, loud.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    steps = sorted(r["steps"] for r in report["replicas"])
    assert f"30 replicas: {steps[0]}-" in loud.stdout or f"30 replicas: {steps[0]} steps" in loud.stdout
    assert "replica 0:" not in loud.stdout and "shard 1 on" in loud.stdout  # 2 shards: a row each


def test_the_progress_line_gives_steps_and_what_is_left():
    from dbkit.sim.figures.ticker import RunTicker

    said: list[str] = []
    tick = RunTicker(said.append, "downpour", steps=1000, seconds=None, every=0.0)
    assert tick.done(3.0, 250) == 0.25
    tick(3.0, 250)
    assert "250 of 1,000 steps" in said[-1] and "3.000 simulated s" in said[-1] and "to go" in said[-1]
    by_time = RunTicker(said.append, "sandblaster", steps=None, seconds=8.0, every=0.0)
    assert by_time.done(2.0, 5) == 0.25 and by_time.done(20.0, 5) == 1.0


@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_stop_signal_writes_the_report_of_what_was_simulated(tmp_path, signame, status):
    """Ctrl-C, or a batch system's SIGTERM at its time limit: the simulation stops, its report (of what
    ran, marked interrupted) is written and the exit status is 130 or 143."""
    import signal
    import time

    report = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, "-m", "dbkit", "simulate", "downpour", "--replicas", "20", "--steps",
                             "10000000", "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # the cluster's line: the run is set up ...
        assert first.startswith("simulated cluster"), first
        assert "simulated s" in proc.stdout.readline()  # ... and a progress line: it is simulating
        time.sleep(0.5)
        proc.send_signal(getattr(signal, signame))
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == status, err
    assert "Traceback" not in err and f"interrupted ({signame})" in out
    r = json.loads(report.read_text())
    assert validate_report(r) == [] and r["interrupted"] is True and r["signal"] == signame
    assert 0 < r["steps"] < 10000000 and r["simulated"] is True
