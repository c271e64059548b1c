"""Each benchmark script runs end to end at tiny sizes and writes the JSON its docs describe.

Only structure and counts are checked (rows, units handed out, bytes against the connectivity
minimum); the timings themselves belong in docs/benchmarks.md, never in an assertion.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str, tmp_path: Path) -> dict:
    out = tmp_path / f"{script}.json"
    env = {**os.environ, "DBKIT_SMALL": "1"}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / f"{script}.py"), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == script and report["machine"]
    return report


def benchmark(name: str):
    """The benchmark script ``name`` imported as a module (its functions called in this process)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_ps_roundtrip(tmp_path):
    r = run("ps_roundtrip", "--repeats", "2", "--sizes", "10,1000", "--shards", "1,2", tmp_path=tmp_path)
    assert [(row["parameters"], row["shards"], row["transport"]) for row in r["rows"]] == [
        (size, shards, transport) for size in (10, 1000) for shards in (1, 2) for transport in ("actor", "socket")]
    assert all(row["fetch_ms"] > 0 and row["push_ms"] > 0 for row in r["rows"])


def test_sandblaster_balance(tmp_path):
    r = run("sandblaster_balance", "--batches", "1", "--dataset", "digits", "--model", "mlp",
            "--work-unit-size", "50", tmp_path=tmp_path)
    assert len(r["rows"]) == 5 and r["rows"][0]["ratio"] == 1.0
    for row in r["rows"]:  # every unit of the batch was done (backups may add duplicates that won)
        assert sum(row["units_per_replica"].values()) >= row["units_per_batch"]
        assert row["backups_won"] <= row["backups_issued"]
    static = [row for row in r["rows"] if row["setting"].startswith("static")]
    assert all(row["backups_issued"] == 0 for row in static)
    assert all(len(set(row["units_per_replica"].values())) == 1 for row in static)  # an equal split


def test_downpour_throughput(tmp_path):
    r = run("downpour_throughput", "--seconds", "0.5", "--cases", "digits", "--replicas", "1,2", "--n", "1",
            tmp_path=tmp_path)
    rows = r["digits"]["downpour"]
    assert [(row["replicas"], row["overlap"], row["transport"]) for row in rows] == [
        (1, True, "socket"), (1, False, "socket"), (2, True, "socket"), (2, False, "socket")]
    assert all(row["examples_per_second"] > 0 for row in rows) and r["digits"]["baseline"]["parameters"] > 0
    ceiling = r["digits"]["baseline"]["ceiling"]
    assert ceiling["one"] > 0 and ceiling["two"] > 0 and ceiling["ratio"] == ceiling["two"] / ceiling["one"]
    assert len(r["digits"]["baseline"]["windows"]) == 2  # before and after the Downpour rows
    ceilings = r["digits"]["baseline"]["ceilings"]  # likewise the ceiling; each row against the mean of the two
    assert len(ceilings) == 2 and ceiling["ratio"] in ceilings
    for row in rows:
        assert row["of_ceiling_median"] == pytest.approx(row["speedup"] / (sum(ceilings) / 2))
    # Downpour with no framework, at n = 1 (the 2-replica rows' n), measured around the round as well
    bare = r["digits"]["baseline"]["bare_downpour"]["1"]
    assert len(bare) == 2 and all(eps > 0 for eps in bare)
    for row in rows:
        assert ("of_bare_median" in row) == (row["replicas"] == 2)
        if row["replicas"] == 2:
            assert row["of_bare_median"] == pytest.approx(row["speedup"] / row["bare"])
    floor = r["digits"]["baseline"]["floor"]["sgd"]
    assert all(v > 0 for v in floor.values())
    # a framework-free Downpour still does the exchange's work: at most compute alone, and below the ceiling
    assert all(0 < row["bound"] <= 1 for row in rows if row["replicas"] == 1)
    assert all(0 < row["bound"] < ceiling["ratio"] for row in rows if row["replicas"] == 2)


def test_bare_downpour(tmp_path):
    r = run("bare_downpour", "--case", "digits", "--n", "2", "--seconds", "1", tmp_path=tmp_path)
    assert r["one"] > 0 and r["two"] > 0 and r["ratio"] == r["two"] / r["one"]
    # both bare replicas learn through their exchanges: each one's loss falls from its first steps
    assert len(r["losses"]) == 2 and all(last < first for first, last in r["losses"])


def test_thread_time(tmp_path):
    r = run("thread_time", "--n", "2", "--seconds", "2", tmp_path=tmp_path)
    for name in ("dbkit", "bare"):
        assert r[name]["step_ms"] > 0 and 0 <= r[name]["idle_cores"] <= os.cpu_count()
        threads = r[name]["threads"]
        assert len({t["process"] for t in threads}) == 2  # both processes' busy threads
        assert all(t["run_ms"] > 0 and t["queued_ms"] >= 0 for t in threads)
    # dbkit's replicas run as Dask tasks; the names come from the workers' own threads
    assert any("Dask-Default-Threads" in t["thread"] for t in r["dbkit"]["threads"])


def test_raw_wire(tmp_path):
    r = run("raw_wire", "--sizes", "40,400000", "--trips", "20", tmp_path=tmp_path)
    small, large = r["rows"]
    assert (small["nbytes"], large["nbytes"]) == (40, 400000)
    assert all(row["wall_ms"] > 0 and row["caller_cpu_ms"] >= 0 and row["server_cpu_ms"] >= 0 for row in r["rows"])


def test_partition_speedup(tmp_path):
    r = run("partition_speedup", "--steps", "2", "--ks", "1,2", "--transport", "socket,actor", tmp_path=tmp_path)
    for name in ("local", "dense"):
        rows = r[name]["rows"]
        assert [(row["k"], row["transport"]) for row in rows] == [(1, "socket"), (1, "actor"), (2, "socket"),
                                                                  (2, "actor")]
        assert rows[0]["bytes_per_step"] == 0
        for row in rows[2:]:  # the same bytes either way: the connectivity's minimum
            assert row["bytes_per_step"] == row["min_bytes_per_step"] > 0
            assert row["of_bare"] == pytest.approx(row["bare_ms"] / row["step_ms"]) and row["bare_ms"] > 0
        assert len(r[name]["bare_ms"]) == 2  # measured between the two K = 2 rows


def test_partition_downpour(tmp_path):
    r = run("partition_downpour", "--cases", "image-local", "--seconds", "1", "--rounds", "1",
            "--transport", "socket,actor", "--workers", "3", tmp_path=tmp_path)
    assert r["workers"] == 3  # as the cluster counts them
    rows = r["image-local"]["transports"]
    assert set(rows) == {"socket", "actor"}
    for row in rows.values():
        assert row["k1"] > 0 and row["k2"] > 0 and row["ratio"] == pytest.approx(row["k2"] / row["k1"])
        c = row["ceiling"]
        assert c["ratio"] == pytest.approx(row["k1_step_ms"] / (row["k1_step_ms"] - c["whole_ms"] + c["bare_ms"]))


def test_panel_latency(tmp_path):
    r = run("panel_latency", "--moves", "2", "--seconds", "0.5", "--rounds", "1", tmp_path=tmp_path)
    assert len(r["applied_s"]) == len(r["shown_s"]) == 2 and all(a <= s for a, s in zip(r["applied_s"], r["shown_s"]))
    assert r["frames"] > 0 and 0 < r["full_draws"] <= r["frames"]
    assert r["examples_per_second_with_panel"][0] > 0 and r["examples_per_second_without"][0] > 0


def test_sim_job(tmp_path):
    r = run("sim_job", "--replicas", "3", "--budget", "4", "--moves", "2", "--target", "0.99", "--n", "4",
            "--shards", "3", tmp_path=tmp_path)
    assert r["slider"]["moves"] == 2 and r["slider"]["shown_max"] > 0
    assert (r["settings"]["n_fetch"], r["settings"]["n_push"], r["settings"]["shards"]) == (4, 4, 3)
    run_ = r["run"]
    assert run_["replicas"] == 3 and run_["steps"] > 0 and run_["simulated_seconds"] > 0
    assert run_["reached_real_seconds"] is None and run_["plain_loop_seconds_same_steps"] > 0  # 0.99: not reached
    assert run_["refreshes_per_second"] > 0 and run_["frames_per_second"] > 0


def test_downpour_throughput_with_partitioned_replicas(tmp_path):
    r = run("downpour_throughput", "--seconds", "0.5", "--cases", "digits", "--replicas", "1", "--n", "1",
            "--overlap", "on", "--partitions", "2", "--no-ceiling", tmp_path=tmp_path)
    (row,) = r["digits"]["downpour"]
    assert row["partitions"] == 2 and row["examples_per_second"] > 0 and "bound" not in row


def test_sim_speed(tmp_path):
    r = run("sim_speed", "--replicas", "10", "--steps", "20", "--repeat", "2", tmp_path=tmp_path)
    assert r["replicas"] == 10 and r["steps"] == 20 and r["events"] > 0 and r["repeat"] == 2
    assert len(r["rounds"]) == 2
    names = ("numpy", "user_command", "user_fit", "plain", "bare_adagrad", "bare_replicas", "direct_replicas",
             "same_classes", "simulated")
    assert all(set(names) == set(one) and all(one[k] > 0 for k in names) for one in r["rounds"])
    # each ratio is the median over the rounds of the ratio within one round (two rounds: their mean)
    within = [one["simulated"] / one["plain"] for one in r["rounds"]]
    assert r["ratio"] == pytest.approx(sum(within) / 2) and r["fig3_seconds"] >= 0
    assert r["of_ceiling"] == pytest.approx(2 / sum(one["simulated"] / one["bare_replicas"] for one in r["rounds"]))
    assert 0 <= r["stacked_gradients"] <= 10 * 20
    assert r["user_command_ratio"] == pytest.approx(sum(one["user_command"] / one["numpy"] for one in r["rounds"]) / 2)
    at_4 = run("sim_speed", "--replicas", "4", "--steps", "8", "--n", "4", tmp_path=tmp_path)
    assert "direct_replicas" not in at_4["rounds"][0] and "direct_replicas_seconds" not in at_4  # n = 1 only


def test_the_numpy_floor_computes_dbkit_s_mlp_gradient():
    """The floor the user's command is timed against computes what the simulated replicas compute: the digits
    MLP's loss and gradient, checked against dbkit's network (itself checked against central differences)."""
    sim_speed = benchmark("sim_speed")
    data, net = sim_speed.digits_mlp()
    for seed, n in ((1, 7), (2, 32)):
        flat = net.init_params(seed)
        x, y = data.X_train[n:2 * n], data.y_train[n:2 * n]
        grad = np.empty_like(flat)
        loss = sim_speed.numpy_gradient(flat, grad, x, y)
        want_loss, want = net.loss_and_grad(flat, x, y)
        assert loss == pytest.approx(want_loss, rel=1e-5)
        np.testing.assert_allclose(grad, want, rtol=1e-4, atol=1e-6)


def test_sim_speed_refuses_no_rounds(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sim_speed.py"), "--repeat", "0"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--repeat must be at least 1" in proc.stderr


@pytest.mark.parametrize("n", [1, 4])
def test_the_speed_ceiling_does_the_simulated_replicas_work(n):
    """``bare_replicas`` (no classes, no clock) ends with the shard's parameters bit for bit those of dbkit's
    replicas stepping in turn on an in-process Adagrad shard: the ceiling does the same work, fetches
    included (each replica's first at its first step, after the replicas before it have pushed)."""
    sim_speed = benchmark("sim_speed")
    _, bare = sim_speed.bare_replicas(6, 9, n)
    _, classes = sim_speed.same_classes(6, 9, 1, n)
    assert bare.dtype == classes.dtype == np.float32
    assert np.array_equal(bare, classes)
    _, other = sim_speed.bare_replicas(6, 9, n, lr=0.04)  # and it is not equal whatever it computes
    assert not np.array_equal(other, classes)
    if n == 1:  # the minimal replica loops on dbkit's shard: the same work again
        _, direct = sim_speed.direct_replicas(6, 9)
        assert np.array_equal(direct, classes)


def test_sim_validation_predicts_one_communication_bound_point(tmp_path):
    # The one validation point CI runs: 2 replicas of the digits MLP exchanging every step, real and simulated
    # on the shipped profile. The report's arithmetic is checked, not how close the prediction comes (a timing).
    # Measured twice (--repeat 2): the prediction is judged against the mean, and the two real runs'
    # distance from each other is the noise floor, given per row and over the grid.
    r = run("sim_validation", "--cases", "digits", "--replicas", "2", "--n", "1", "--seconds", "2",
            "--sandblaster", "", "--partitions", "", "--repeat", "2", tmp_path=tmp_path)
    (row,) = r["rows"]
    first, second = row["real_runs"]
    assert row["real"]["examples_per_second"] == pytest.approx(
        (first["examples_per_second"] + second["examples_per_second"]) / 2)
    assert sum(row["real"]["histogram"].values()) == (sum(first["histogram"].values())
                                                      + sum(second["histogram"].values()))
    assert row["real_spread"]["examples_per_second"] == pytest.approx(
        (second["examples_per_second"] - first["examples_per_second"]) / first["examples_per_second"])
    assert r["summary"]["real_vs_real"]["examples_per_second"]["worst_abs_error"] == pytest.approx(
        abs(row["real_spread"]["examples_per_second"]))
    assert row["config"] == {"case": "digits", "replicas": 2, "n": 1} and r["other_rows"] == []
    # the error as the report states it (its size is the benchmark's result, in docs/benchmarks.md: a bound on
    # it here was a wall-clock assertion, and a CI host under load ran 2.8x slower than the shipped profile)
    real, simulated = row["real"]["examples_per_second"], row["simulated"]["examples_per_second"]
    assert real > 0 and simulated > 0
    assert row["error"]["examples_per_second"] == pytest.approx((simulated - real) / real)
    assert abs(row["simulated"]["staleness"] - row["real"]["staleness"]) <= 1.0  # about 3 versions, both
    assert 0 <= row["ks"] <= 1 and set(r["summary"]) >= {"examples_per_second", "staleness", "ks_median"}


def test_sim_validation_refuses_a_repeat_below_one(tmp_path):
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sim_validation.py"), "--repeat", "0"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "--repeat must be at least 1, got 0" in proc.stderr


def test_sim_instructions_reads_cachegrind_counts(tmp_path):
    """The instruction counter sums a Cachegrind file's summary, and apart libc's copy and fill routines."""
    sim_instructions = benchmark("sim_instructions")
    cg = tmp_path / "out.cg"
    cg.write_text("desc: I1 cache: ...\ncmd: python x.py\nevents: Ir\n"
                  "fl=./string/memmove-vec-unaligned-erms.S\nfn=__memcpy_avx_unaligned_erms\n10 300\n11 20\n"
                  "fl=Python/ceval.c\nfn=_PyEval_EvalFrameDefault\n5 1000\n"
                  "fl=./string/memset-vec-unaligned-erms.S\nfn=__memset_avx2_unaligned_erms\n3 7\n"
                  "summary: 1327\n")
    assert sim_instructions.counts(cg) == (1327, 327)
    (tmp_path / "bad.cg").write_text("events: Ir\nfn=f\n1 2\n")
    with pytest.raises(ValueError, match="no summary line"):
        sim_instructions.counts(tmp_path / "bad.cg")
    assert sim_instructions.loops(1)[2] == "direct_replicas" and "direct_replicas" not in sim_instructions.loops(4)


def test_sim_instructions_refuses_without_valgrind(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # nothing on PATH: no valgrind
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "sim_instructions.py"), "--steps", "1"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "valgrind is not on PATH" in proc.stderr


def test_after_distbelief(tmp_path):
    r = run("after_distbelief", "--seconds", "1", "--rounds", "2", "--replicas", "2", "--target", "0.5",
            tmp_path=tmp_path)
    names = ["downpour-adagrad", "staleness-aware", "diloco", "easgd", "ssp", "backup-sync"]
    assert list(r["median"]) == names and len(r["rounds"]) == 2
    assert all(set(one) == set(names) for one in r["rounds"])
    for name in names:
        m, rows = r["median"][name], [one[name] for one in r["rounds"]]
        assert m["final_accuracy"] == pytest.approx(np.median([x["final_accuracy"] for x in rows]))
        assert all(x["examples"] > 0 and x["updates_per_shard"] > 0 for x in rows)
    # DiLoCo pushes once a round of 8 steps: far fewer bytes per example than Downpour's push every step
    pushed = {name: r["median"][name]["bytes_pushed_per_example"] for name in names}
    assert pushed["diloco"] < pushed["downpour-adagrad"] / 3


def test_thread_count(tmp_path):
    r = run("thread_count", "--replicas", "3", "--shards", "2", "--workers", "2", "--seconds", "1",
            tmp_path=tmp_path)
    assert r["threads"] > r["cluster_alone"] > 0  # the job's own threads come on top of Dask's
    assert sum(r["python_threads_by_name"].values()) <= r["threads"]  # (the libraries' threads are not Python's)
    bare = r["bare"]  # the ceiling without dbkit: actors and seceded tasks cost Dask threads of its own
    assert bare["with_actors_and_tasks"] > bare["cluster_alone"] > 0


def test_step_files(tmp_path):
    """The files a step passes through are found on both sides of the hand-off: the replica's step reaches its
    in-process shard's end (not its rule), and the rule's apply runs on the shard's own call thread."""
    r = run("step_files", "--runtimes", "in-process", tmp_path=tmp_path)["in-process"]
    assert {"dbkit/downpour/replica.py", "dbkit/ps/threaded_shard.py", "dbkit/nn/network.py"} <= set(r["replica"])
    assert "dbkit/ps/rules.py" not in r["replica"]  # the arithmetic of the shard runs on its call thread
    assert {"dbkit/ps/shard.py", "dbkit/ps/rules.py"} <= set(r["shard"])
    assert r["files"] == len(set(r["replica"]) | set(r["shard"]))


def test_scheduler_loss(tmp_path):
    """A round kills a real scheduler under a running job: the run ends by itself with its report, and a bare
    Dask client of the same scheduler sees the loss too (the floor)."""
    r = run("scheduler_loss", "--rounds", "1", tmp_path=tmp_path)
    [row] = r["rounds"]
    assert row["exit"] == 1 and row["ended"] == "scheduler lost"
    assert row["run_s"] > 0 and row["bare_client_s"] >= 0 and r["median_run_s"] == row["run_s"]


def test_the_figures_floor_computes_the_figures_mlp_gradient():
    """``sim_figures``' floor computes the gradient Fig. 4 and 5's runs compute: the signals MLP (40-128-10,
    no weight penalty), checked against dbkit's network (itself checked against central differences)."""
    from dbkit.nn import build

    sim_figures = benchmark("sim_figures")
    net = build("mlp", 40, 10, l2=0.0)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(50, 40)).astype(np.float32), rng.integers(0, 10, 50)
    flat = net.init_params(1)
    shapes = [(40, 128), (128,), (128, 10), (10,)]
    cuts = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]
    params = [part.reshape(s) for part, s in zip(np.split(flat, cuts), shapes)]
    grads = [np.empty_like(p) for p in params]
    loss = sim_figures._gradient(params, grads, x, y)
    want_loss, want = net.loss_and_grad(flat, x, y)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    np.testing.assert_allclose(np.concatenate([g.ravel() for g in grads]), want, rtol=1e-4, atol=1e-6)


def test_the_figures_floor_counts_the_work_a_report_says_was_done():
    """Steps by update rule (the warm start is SGD) and Sandblaster's batches as unit gradients, from a Fig. 4
    report (one number a method) and a Fig. 5 one (a list a method)."""
    work = benchmark("sim_figures").work
    fig4 = {"warm_start": {"steps": 100}, "methods": {
        "SGD": {"replicas": 1, "steps": 500, "batches": 0}, "Downpour 2": {"replicas": 2, "steps": 300, "batches": 0},
        "Downpour Adagrad 20": {"replicas": 20, "steps": 700, "batches": 0},
        "Sandblaster 200": {"replicas": 200, "steps": 9, "batches": 12}}}
    assert work(fig4, 20_000) == {"sgd_steps": 900, "adagrad_steps": 700, "unit_gradients": 12 * 400}
    fig5 = {"warm_start": {"steps": 10}, "methods": {
        "Downpour Adagrad": {"replicas": [2, 4], "steps": [40, 60], "batches": [0, 0]},
        "Sandblaster": {"replicas": [2, 4], "steps": [3, 3], "batches": [5, 6]}}}
    assert work(fig5, 1_000) == {"sgd_steps": 10, "adagrad_steps": 100, "unit_gradients": 11 * 20}


def test_sim_vs_emulated_refuses_unknown_parts_and_too_few_hosts_for_sandblaster(tmp_path):
    for args, says in ((["--parts", "downpour,nope"], "--parts takes"),
                       (["--parts", "sandblaster", "--hosts", "4"], "needs --hosts 6")):
        proc = subprocess.run([sys.executable, str(BENCHMARKS / "sim_vs_emulated.py"), *args], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_emulated_cluster_refuses_more_flows_than_one_host_has_partners_in_one_line(tmp_path):
    for flows in ("8", "0", "1,x", ""):
        proc = subprocess.run([sys.executable, str(BENCHMARKS / "emulated_cluster.py"), "--hosts", "8", "--flows",
                               flows], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and "--flows takes whole numbers in [1, 7]" in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_sim_vs_emulated_reads_the_slowed_replicas_share_of_the_units_from_a_sandblaster_report():
    from dbkit import SandblasterLBFGS
    from dbkit.runtime import InProcessCluster

    with InProcessCluster(workers=2) as m, SandblasterLBFGS("linear", "digits", cluster=m, replicas=2, shards=1,
                                                             iterations=2, slow_replicas={0: 5.0}) as job:
        job.fit(progress=False)
        report = job.report()
    b = benchmark("sim_vs_emulated").batches(report)
    units = report["sandblaster"]["units_per_replica"]  # (a replica whose every unit a backup beat is not listed)
    assert b.slowed_share == units.get("0", 0) / sum(units.values()) and b.slowed_share < 0.5  # it did less
    assert b.batch_seconds == report["sandblaster"]["batch_seconds_median"] > 0 and b.iterations == 2


def test_fig3_emulated_predicts_a_saved_run_again_with_the_simulator_as_it_is_now(tmp_path):
    """``--predict`` measures nothing: from a saved run's host probes and measured rows it works out the
    simulator's columns again, the same as ``partitioned_step`` on the emulated profile; a file that is not a
    saved run is refused with exit 2."""
    from dbkit.emulate.profile import HostProbes
    from dbkit.runtime.sim.partitioned_step import partitioned_step
    from dbkit.sim import ModelShape

    fig3 = benchmark("fig3_emulated")
    probes = HostProbes(0.036, 0.17, 0.0002, bulk_exchange_seconds=0.05, thin_exchange_seconds=0.009,
                        thin4_exchange_seconds=0.016, fresh_seconds_per_byte=6e-10)
    models = fig3.models()
    rows = {name: [{"k": k, "step_ms": 100.0 / k, "k1_ms": 100.0, "speedup": float(k), "compute_ms": 50.0 / k,
                    "rest_ms": 50.0 / k, "bytes_per_step": 0.0} for k in (1, 2, 4)] for name in models}
    saved = {"runs": [{"link": "1gbit", "hosts": 8, "cpu": 0.25, "gradient_seconds": 0.023,
                       "host_probes": dataclasses.asdict(probes),
                       "models": {name: {"parameters": net.size, "rows": rows[name]}
                                  for name, net in models.items()}}]}
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    report = run("fig3_emulated", "--predict", str(tmp_path / "saved.json"), tmp_path=tmp_path)
    profile = fig3.profiles(8, "1gbit", 0.25, 0.023, probes)["simulated"]
    for name, net in models.items():
        shape = ModelShape.of(net)
        one = partitioned_step(profile, shape, 1, 32, bands=True, update=False).seconds
        for row in report["runs"][0]["models"][name]["rows"]:
            expected = one / partitioned_step(profile, shape, row["k"], 32, bands=True, update=False).seconds
            assert row["simulated_speedup"] == pytest.approx(expected)
            assert row["error"] == pytest.approx(expected / row["k"] - 1)
            assert row["simulated_sixth_pass"] > 0 and row["simulated_one_rate"] > 0
    (tmp_path / "bad.json").write_text('{"runs": [{"link": "1gbit"}]}')
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "fig3_emulated.py"), "--predict",
                           str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not a run saved with --json" in proc.stderr


def test_wire_strangers(tmp_path):
    r = run("wire_strangers", "--strangers", "20", "--rounds", "3", tmp_path=tmp_path)
    assert set(r["median_seconds"]) == {"wire, none", "wire, strangers", "bare, none", "bare, strangers"}
    assert r["strangers"] == 20 and r["ratio"] > 0 and r["floor_ratio"] > 0
