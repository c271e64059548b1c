"""The ``dbkit`` command: reports, plots, errors, the demo, and a real scheduler."""

import json
import subprocess
import sys

import pytest

from dbkit.telemetry import validate_report

PNG = b"\x89PNG\r\n\x1a\n"


def dbkit(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "dbkit", *args], capture_output=True, text=True, timeout=timeout)


def test_run_sgd_on_digits_reaches_95_percent_and_reports_everything(tmp_path):
    out = dbkit("run", "sgd", "--dataset", "digits", "--report", str(tmp_path / "r.json"),
                "--plot", str(tmp_path / "p.png"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert validate_report(report) == []
    assert report["final"]["test_accuracy"] >= 0.95
    assert report["algorithm"] == "sgd" and report["config"]["dataset"] == "digits"
    assert report["replicas"][0]["steps"] == report["config"]["steps"] == 2000
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    assert "test accuracy" in out.stdout


def test_the_time_to_a_target_accuracy_is_printed_and_reported(tmp_path):
    out = dbkit("run", "sgd", "--dataset", "signals", "--steps", "600", "--eval-every", "100",
                "--target-accuracy", "0.3", "--report", str(tmp_path / "r.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    hit = next(t for t in report["time_to_accuracy"] if t["target"] == 0.3)
    assert report["config"]["target_accuracy"] == 0.3 and hit["step"] in {h["step"] for h in report["history"]}
    assert f"time to 30% test accuracy: {hit['seconds']:.1f}s (step {hit['step']})" in out.stdout
    bad = dbkit("run", "sgd", "--target-accuracy", "1.5")
    assert bad.returncode == 2 and "target_accuracy" in bad.stderr


def test_run_sgd_on_cluster_shards(tmp_path):
    out = dbkit("run", "sgd", "--on-cluster", "--shards", "2", "--steps", "60", "--eval-every", "30",
                "--report", str(tmp_path / "r.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert validate_report(report) == []
    assert len(report["shards"]) == 2
    assert all(s["worker"].startswith("tcp://127.0.0.1:") and s["updates"] == 60 for s in report["shards"])
    assert sum(s["size"] for s in report["shards"]) == report["model"]["parameters"]
    step_bytes = 60 * 4 * report["model"]["parameters"]
    assert report["replicas"][0]["fetches"] == report["replicas"][0]["pushes"] == 60
    assert report["bytes"]["pushed"] == step_bytes and report["bytes"]["fetched"] >= step_bytes  # + evaluations
    assert [e["type"] for e in report["events"]].count("Sample") >= 2


@pytest.mark.parametrize("args,message", [
    (["--lr", "-1"], "lr must be"),
    (["--batch-size", "0"], "batch_size must be"),
    (["--dataset", "nowhere.npz"], "nowhere.npz"),
    (["--model", "speech"], "use --dataset speech"),
    (["--replicas", "3"], "replicas must be 1"),
    (["--hidden", "1,,2"], "--hidden takes comma-separated widths"),  # issue #21, 12: it was read as 1,2
])
def test_bad_flags_exit_2_with_a_clear_message(args, message):
    out = dbkit("run", "sgd", "--steps", "5", "--quiet", *args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_help_explains_flags_in_the_papers_words():
    out = dbkit("run", "sgd", "--help")
    assert out.returncode == 0
    for words in ("--n-fetch", "--n-push", "parameter server shards", "model replicas", "Adagrad", "--report"):
        assert words in out.stdout


def test_demo_writes_report_and_plot(tmp_path):
    out = dbkit("demo", "--out", str(tmp_path), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert validate_report(report) == []
    assert report["cluster"]["kind"] == "local" and len(report["shards"]) == 2
    assert report["final"]["test_accuracy"] > 0.9
    assert (tmp_path / "plot.png").read_bytes()[:8] == PNG


def test_run_against_a_real_dask_scheduler_and_workers(tmp_path, dask_cluster_address):
    from distributed import Client

    address = dask_cluster_address
    out = dbkit("run", "sgd", "--scheduler", address, "--shards", "2", "--steps", "50", "--eval-every", "25",
                "--report", str(tmp_path / "r.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cluster"]["kind"] == "scheduler" and len(report["cluster"]["workers"]) == 2
    assert len({s["worker"] for s in report["shards"]}) == 2
    assert all(s["updates"] == 50 for s in report["shards"])
    # the cluster outlives the run: dbkit closed only its own client and actors
    with Client(address, timeout=5) as c:
        assert len(c.scheduler_info()["workers"]) == 2


def test_run_downpour_writes_a_whole_report(tmp_path):
    out = dbkit("run", "downpour", "--replicas", "2", "--shards", "2", "--n-fetch", "2", "--n-push", "2",
                "--steps", "300", "--eval-every", "100", "--report", str(tmp_path / "d.json"),
                "--plot", str(tmp_path / "d.png"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "d.json").read_text())
    assert validate_report(report) == []
    c = report["config"]
    assert (c["algorithm"], c["replicas"], c["shards"], c["downpour"]["n_fetch"], c["downpour"]["n_push"],
            c["optimizer"]) == ("downpour", 2, 2, 2, 2, "adagrad")
    assert len(report["replicas"]) == 2 and report["steps"] >= 300
    assert all(r["pushes"] * 2 >= r["steps"] - 1 for r in report["replicas"])
    assert (tmp_path / "d.png").read_bytes()[:8] == PNG
    assert "replica 1:" in out.stdout and "staleness" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["--n-fetch", "0"], "n_fetch must be"),
    (["--replicas", "0"], "replicas must be"),
    (["--warm-start-steps", "-1"], "warm_start_steps must be"),
    (["--partitions", "3", "--shards", "2"], "shards must be at least partitions (3)"),
    (["--partitions", "0"], "partitions must be"),
])
def test_bad_downpour_flags_exit_2(args, message):
    out = dbkit("run", "downpour", "--steps", "5", "--quiet", *args)
    assert out.returncode == 2 and message in out.stderr


def test_downpour_on_a_real_dask_scheduler(tmp_path, dask_cluster_address):
    out = dbkit("run", "downpour", "--scheduler", dask_cluster_address, "--replicas", "2", "--shards", "2",
                "--steps", "200", "--report", str(tmp_path / "r.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["cluster"]["kind"] == "scheduler"
    assert len({r["worker"] for r in report["replicas"]}) == 2 and all(r["pushes"] > 0 for r in report["replicas"])
    assert len(set(report["cluster"]["shard_workers"])) == 2


def test_run_sandblaster_writes_a_whole_report(tmp_path):
    out = dbkit("run", "sandblaster", "--replicas", "2", "--work-unit-size", "300", "--iterations", "15",
                "--slow-replica", "0:3", "--report", str(tmp_path / "s.json"), "--quiet")
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "s.json").read_text())
    assert validate_report(report) == []
    sb = report["sandblaster"]
    c = report["config"]["sandblaster"]
    assert c["memory"] == 10 and report["config"]["slow_replicas"] == {"0": 3.0}
    assert 1 <= sb["iterations"] <= 15 and sb["work_units_per_batch"] == 6
    assert report["history"][-1]["train_loss"] < report["history"][0]["train_loss"]
    assert "L-BFGS:" in out.stdout and "backups" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["--slow-replica", "zero:5"], "INDEX:FACTOR"),
    (["--slow-replica", "7:5"], "slow_replicas"),
    (["--memory", "0"], "memory must be"),
    (["--work-unit-size", "-2"], "work_unit_size must be"),
])
def test_bad_sandblaster_flags_exit_2(args, message):
    out = dbkit("run", "sandblaster", "--iterations", "2", "--quiet", *args)
    assert out.returncode == 2 and message in out.stderr


def test_partitioned_downpour_on_a_real_dask_scheduler(tmp_path, dask_cluster_address):
    out = dbkit("run", "downpour", "--scheduler", dask_cluster_address, "--model", "image-local",
                "--replicas", "2", "--partitions", "2", "--shards", "2", "--steps", "100",
                "--report", str(tmp_path / "r.json"))
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert validate_report(report) == [] and report["config"]["downpour"]["partitions"] == 2
    b = report["bytes"]
    assert b["between_partitions"] == b["between_partitions_min"] > 0
    assert "2 replicas of 2 partitions each" in out.stdout and "between partitions" in out.stdout
    for r in report["replicas"]:  # the partitions of a replica ran on both workers
        assert len(r["partitions"]) == 2 and all(p["pushes"] > 0 for p in r["partitions"])
        assert len({p["worker"] for p in r["partitions"]}) == 2


def test_partitions_are_for_downpour_only():
    out = dbkit("run", "sandblaster", "--partitions", "2", "--quiet")
    assert out.returncode == 2 and "downpour only" in out.stderr


def _started_workers(proc, n: int, timeout: float = 120.0) -> None:
    """Wait until ``proc`` has ``n`` LocalCluster worker processes and a moment more (training has begun)."""
    import time

    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        kids = [k for k in psutil.Process(proc.pid).children(recursive=True) if "spawn_main" in " ".join(k.cmdline())]
        if len(kids) >= n:
            time.sleep(4.0)
            return
        time.sleep(0.2)
    raise AssertionError("the LocalCluster's workers never started")


def _run_in_its_own_group(args, report) -> subprocess.Popen:
    """``dbkit run ARGS`` for 120 s in a process group of its own (as a terminal's job), once its LocalCluster's
    two workers have started and trained a moment."""
    import os
    import signal

    proc = subprocess.Popen([sys.executable, "-m", "dbkit", "run", *args, "--seconds", "120", "--quiet",
                             "--report", str(report)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=dict(os.environ, DBKIT_SMALL="1"))
    try:
        _started_workers(proc, 2)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    return proc


@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
@pytest.mark.parametrize("args", [
    ("downpour", "--replicas", "2"),
    ("downpour", "--model", "image-local", "--replicas", "1", "--partitions", "2"),
    ("sandblaster", "--replicas", "2"),
], ids=["downpour", "partitioned", "sandblaster"])
def test_a_signal_to_the_whole_process_group_stops_and_reports(tmp_path, args, signame, status):
    """As a terminal's Ctrl-C does (SIGINT to every process of the group, the LocalCluster's workers too),
    and as a batch system does at a time limit (SIGTERM to the group): the run stops, writes its report,
    exits 130 or 143, prints no traceback and leaves no process behind."""
    import os
    import signal

    import psutil

    report = tmp_path / "r.json"
    proc = _run_in_its_own_group(args, report)
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
        # a terminal's Ctrl-C, or a batch system ending the job at its time limit: the whole group, workers too
        os.killpg(proc.pid, getattr(signal, signame))
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == status, err
    assert "Traceback" not in err and "Traceback" not in out
    r = json.loads(report.read_text())
    assert r["interrupted"] is True and r["signal"] == signame and validate_report(r) == []
    assert sum(x["steps"] for x in r["replicas"]) > 0 or r["algorithm"] == "sandblaster"
    _, alive = psutil.wait_procs(kids, timeout=15)
    assert not [k for k in alive if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


def test_a_diverging_run_says_so_once_with_the_fix_and_exits_3(tmp_path):
    out = dbkit("run", "sgd", "--lr", "100", "--steps", "200", "--quiet", "--report", str(tmp_path / "r.json"))
    assert out.returncode == 3 and "Traceback" not in out.stderr  # issue #21, 10: it exited 0
    assert out.stdout.count("Lower the learning rate") == 1 and "diverged" in out.stdout
    assert out.stderr.strip().startswith("dbkit: the run diverged: every replica stopped on a non-finite")
    assert json.loads((tmp_path / "r.json").read_text())["state"] == "diverged"


def test_a_downpour_run_whose_model_ends_with_a_non_finite_loss_exits_3_with_its_report(tmp_path):
    """The shards refuse every non-finite step, so Downpour's replicas may never stop on their own; the
    final model's loss says the run diverged. The same settings at a sane rate exit 0 (the reference)."""
    runs = {lr: dbkit("run", "downpour", "--optimizer", "sgd", "--lr", lr, "--steps", "400", "--quiet", "--report",
                      str(tmp_path / f"r{lr}.json")) for lr in ("100", "0.05")}
    assert runs["100"].returncode == 3, runs["100"].stdout + runs["100"].stderr
    line = runs["100"].stderr.strip()  # the replicas may also have stopped on non-finite gradients first
    assert line.startswith("dbkit: the run diverged: ") and "\n" not in line
    assert line.endswith("; lower the learning rate (lr=100.0) or use Adagrad")
    assert validate_report(json.loads((tmp_path / "r100.json").read_text())) == []
    assert runs["0.05"].returncode == 0, runs["0.05"].stderr


def test_a_final_loss_far_above_the_start_counts_as_diverged_and_a_warm_start_s_noise_does_not():
    """CI once saw lr=100 end with a finite but exploded loss and exit 0: with a stable log-softmax, parameters
    too large give a huge finite loss, not NaN. Judged against the run's own loss at step 0, floored at 1."""
    from dbkit.cli.main import _diverged

    def report(start: float, end: float) -> dict:
        return {"state": "stopped", "config": {"lr": 100.0}, "final": {"train_loss": end, "test_loss": end},
                "history": [{"step": 0, "train_loss": start, "test_loss": start}]}

    why = _diverged(report(2.6, 3.1e4))
    assert why == ("the final model's train loss (3.1e+04) is over 10 times max(1, its loss at the start, 2.6); "
                   "lower the learning rate (lr=100.0) or use Adagrad")
    assert _diverged(report(2.6, 0.1)) is None and _diverged(report(2.6, 25.0)) is None  # 25 < 10 x 2.6
    assert _diverged(report(0.05, 0.6)) is None  # a warm start's small loss: the floor of 1 keeps this one
    assert _diverged(report(0.05, 10.5)) is not None
    assert _diverged(report(2.6, float("nan"))) == ("the final model's loss is not finite; lower the learning "
                                                   "rate (lr=100.0) or use Adagrad")
    assert _diverged({**report(2.6, 3.1e4), "cost_only": True}) is None


def test_a_failed_run_writes_its_report_says_why_in_one_line_and_exits_1(tmp_path, monkeypatch, capsys):
    import dbkit.runner
    from dbkit.cli.main import main

    def failed_run(config, progress=True, **kwargs):
        return {"algorithm": "downpour", "state": "failed", "config": {"dataset": "digits", "model": "mlp"},
                "history": [], "replicas": [], "shards": [], "final": {}, "interrupted": False,
                "events": [{"type": "ErrorEvent", "message": "RuntimeError: lost parameter shard 0 on w"}]}

    monkeypatch.setattr(dbkit.runner, "run", failed_run)
    monkeypatch.setattr("dbkit.cli.summary.print_summary", lambda report, **kwargs: None)
    status = main(["run", "downpour", "--report", str(tmp_path / "r.json"), "--quiet"])
    err = capsys.readouterr().err
    assert status == 1 and (tmp_path / "r.json").exists()
    assert err.strip() == "dbkit: the run failed: RuntimeError: lost parameter shard 0 on w"


def test_a_scheduler_address_that_is_a_web_server_exits_2_in_one_line(tmp_path):
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = dbkit("run", "downpour", "--scheduler", f"tcp://127.0.0.1:{server.server_address[1]}", "--steps", "5",
                    "--quiet", "--report", str(tmp_path / "r.json"), timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert line.startswith("dbkit: error: ") and "is not a Dask scheduler" in line
    assert not (tmp_path / "r.json").exists()


def test_sandblaster_stops_at_its_time_budget(tmp_path):
    """``--seconds`` ends a Sandblaster run between iterations, long before its iteration cap."""
    out = dbkit("run", "sandblaster", "--model", "mlp", "--replicas", "2", "--seconds", "2", "--iterations",
                "100000", "--report", str(tmp_path / "s.json"), "--quiet", timeout=180)
    assert out.returncode == 0, out.stderr
    report = json.loads((tmp_path / "s.json").read_text())
    assert report["config"]["seconds"] == 2 and 1 <= report["sandblaster"]["iterations"] < 100000
    assert "reached" not in report["sandblaster"]["stop_reason"]
    assert "batch gradients (ended by its step or time budget)" in out.stdout


@pytest.mark.parametrize("args", [
    ("downpour", "--model", "image-local", "--replicas", "1", "--partitions", "2"),
    ("sandblaster", "--replicas", "2"),
], ids=["partitioned", "sandblaster"])
def test_a_second_ctrl_c_while_stopping_still_leaves_the_report(tmp_path, args):
    """Issue #21, 5: a second group SIGINT 0.3-1 s after the first hung a run, lost its report (partitioned
    runs) or printed a traceback (Sandblaster). Now the second says how to abandon and the stop goes on."""
    import os
    import signal
    import time

    import psutil

    report = tmp_path / "r.json"
    proc = _run_in_its_own_group(args, report)
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)  # as a hurried hand
        # a stop may be over by then (a Sandblaster run between work units wrote its report and ended in
        # under 0.3 s in CI): then there is nothing to press into, and nothing to say
        pressed_again = proc.poll() is None
        if pressed_again:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out
    hint = "dbkit: stopping, press Ctrl-C again to abandon the report"
    assert err.count(hint) == (1 if pressed_again else 0), err  # heard, not obeyed
    r = json.loads(report.read_text())
    assert r["interrupted"] is True and r["signal"] == "SIGINT" and validate_report(r) == []
    _, alive = psutil.wait_procs(kids, timeout=15)
    assert not [k for k in alive if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


HANGING_STOP = """
import subprocess, sys, time
from dbkit.cli.signals import stop_signals
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with stop_signals() as presses:
    try:
        print(child.pid, flush=True)  # ready: the handler is in place and the signal lands inside the try
        time.sleep(120)
    except KeyboardInterrupt:
        print("stopping", flush=True)
        time.sleep(120)  # a stop that never ends
"""


def test_a_third_ctrl_c_ends_a_stop_that_hangs_at_once_with_130_and_no_child_left():
    """Issue #21, 5: of nine double Ctrl-Cs one hung for good. A stop that never ends: the third signal
    ends the process at once, its children killed, exit 130, saying that no report was written."""
    import os
    import signal

    import psutil

    proc = subprocess.Popen([sys.executable, "-c", HANGING_STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        child = psutil.Process(int(proc.stdout.readline()))
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().strip() == "stopping"
        proc.send_signal(signal.SIGINT)
        assert proc.stderr.readline().strip() == "dbkit: stopping, press Ctrl-C again to abandon the report"
        assert proc.poll() is None  # the second does not end it
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    assert status == 130
    assert proc.stderr.read().strip() == "dbkit: abandoned: no report written"
    assert psutil.wait_procs([child], timeout=5)[1] == []  # the child was killed with it
