"""A job on a simulated cluster (``cluster=dbkit.sim.Cluster(...)``): the same Job interface in
simulated time, checked against plain SGD, the simulator's own batch run, and the same job on a real
LocalCluster; steering at a simulated instant; pause holds simulated time; the panel on it; cleanup."""

import gc
import math
import threading
import time

import numpy as np
import pytest

import dbkit
from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulate
from dbkit.sync_sgd import SGDTrainer
from dbkit.telemetry import Change, Divergence, ReplicaEvent, validate_report

AT_SCALE = Cluster(machines=200, profile="distbelief-2012")


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def sim_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "dbkit-simulation"]


def until(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_job_classes_give_a_simulated_job_on_a_simulated_cluster(digits):
    for cls in (dbkit.DownpourSGD, dbkit.SandblasterLBFGS, dbkit.SyncSGD):
        job = cls("linear", digits, cluster=Cluster())
        assert isinstance(job, cls) and job.algorithm == cls.algorithm
        assert "simulated, here" in job.describe()
        snap = job.snapshot()
        assert snap.state == "created" and snap.simulation.profile == "here" and snap.simulation.speed is None
        job.stop()


def test_one_simulated_replica_reproduces_sync_sgd_exactly(digits):
    cfg = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="sgd", replicas=1, shards=2, overlap=False)
    net = nn.build("mlp", 64, 10, l2=cfg.l2)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    with dbkit.DownpourSGD(net, digits, config=cfg, cluster=Cluster()) as d:
        d.fit(steps=60, progress=False)
        assert d.snapshot().step == 60
        params = d.parameters()
    assert params.tobytes() == base.params.tobytes()
    with dbkit.SyncSGD(net, digits, cluster=AT_SCALE, lr=0.05, optimizer="sgd", shards=3) as s:
        s.fit(steps=60, progress=False)  # sync SGD on simulated shards: the same updates, in simulated time
        assert s.parameters().tobytes() == base.params.tobytes()
        report = s.report()
    assert validate_report(report) == [] and report["algorithm"] == "sgd" and report["simulated"]


def test_a_fit_equals_the_simulators_own_run_and_fits_in_parts_one_fit(digits):
    cfg = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="adagrad", replicas=3, shards=2, steps=90,
                         eval_every=30)
    whole = simulate(cfg, Cluster())  # the batch simulator: the same classes, one budget
    with dbkit.DownpourSGD("mlp", digits, config=cfg, cluster=Cluster()) as d:
        d.fit(steps=90, progress=False)  # stops at exactly its step, its replicas paused at their shares
        assert d.snapshot().step == 90
    report = d.report()  # (once stopped, as the batch simulator's run ends)
    assert validate_report(report) == [] and report["simulated"] and report["profile"] == "here"
    assert report["steps"] == whole["steps"] == 90
    assert report["final"]["test_loss"] == pytest.approx(whole["final"]["test_loss"], rel=1e-6)
    assert report["wall_seconds"] == pytest.approx(whole["wall_seconds"], rel=1e-9)  # simulated seconds
    one = cfg.replace(replicas=1, overlap=False)
    params = []
    for parts in ([90], [30, 30, 30]):  # one blocking replica: where a fit stops changes nothing
        with dbkit.DownpourSGD("mlp", digits, config=one, cluster=Cluster()) as d:
            for steps in parts:
                d.fit(steps=steps, progress=False)
            params.append(d.parameters())
    assert params[0].tobytes() == params[1].tobytes()


@pytest.mark.cluster
def test_the_same_job_on_a_local_cluster_and_simulated_gives_the_same_parameters_and_report(digits, local_cluster):
    cfg = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="adagrad", replicas=1, shards=2, overlap=False,
                         eval_every=20)
    reports, params = {}, {}
    for name, where in (("dask", dict(client=local_cluster.client)), ("simulated", dict(cluster=Cluster("here")))):
        with dbkit.DownpourSGD("mlp", digits, config=cfg, **where) as d:
            d.fit(steps=80, progress=False)
            params[name] = d.parameters()
        reports[name] = d.report()
    assert params["dask"].tobytes() == params["simulated"].tobytes()
    for report in reports.values():
        assert validate_report(report) == []
    assert reports["simulated"]["simulated"] and reports["simulated"]["cluster"]["kind"] == "simulated"
    kinds = {name: {e["type"] for e in r["events"]} for name, r in reports.items()}
    assert kinds["dask"] == kinds["simulated"]
    assert [rep["history"][-1]["step"] for rep in reports.values()] == [80, 80]


def test_fit_for_simulated_seconds_stops_there(digits):
    with dbkit.DownpourSGD("linear", digits, cluster=AT_SCALE, replicas=8, shards=2, lr=0.05) as d:
        d.fit(seconds=0.05, progress=False)
        snap = d.snapshot()
        assert snap.state == "paused" and snap.t == pytest.approx(0.05) and snap.step > 0
        d.set(replicas=30)  # launching 22 replicas takes the control messages' simulated time
        changed = d.snapshot().t
        assert changed > 0.05
        d.fit(seconds=0.02, progress=False)
        assert d.snapshot().t == pytest.approx(changed + 0.02) and d.snapshot().live_replicas == 30
        assert all(e.t <= changed + 0.02 + 1e-9 for e in d.events)


def test_steering_at_scale_replicas_rates_stragglers_and_a_lost_replica(digits):
    d = dbkit.DownpourSGD("linear", digits, cluster=AT_SCALE, replicas=20, shards=4, lr=0.05, eval_every=500)
    d.fit(steps=100, progress=False)
    d.set(n_push=7, n_fetch=3, slow_replicas={0: 5.0})
    assert all((r.n_push, r.n_fetch) == (7, 3) for r in d.replicas() if r.live)
    first = {r.replica: r.steps for r in d.replicas()}
    d.fit(steps=2000, progress=False)
    gained = {r.replica: r.steps - first[r.replica] for r in d.replicas()}
    assert gained[0] < 0.5 * np.median(list(gained.values()))  # the straggler falls behind
    d.set(replicas=150)
    snap = d.snapshot()
    assert snap.live_replicas == 150 and len({r.worker for r in snap.replicas if r.live}) == 150
    assert all((r.n_push, r.n_fetch) == (7, 3) for r in snap.replicas if r.live)  # the new ones too
    steps = {r.replica: r.steps for r in d.replicas()}
    d.fit(steps=1500, progress=False)
    lost = d.lose_replica(5)
    before = d.replicas()[5].pushes
    d.fit(steps=600, progress=False)
    after = d.replicas()
    assert after[5].state == "lost" and after[5].pushes <= before + 1 and after[6].steps > steps[6]
    assert any(isinstance(e, ReplicaEvent) and e.replica == lost and e.what == "lost" for e in d.events)
    d.set(replicas=10)  # the newest leave at their next step
    until(lambda: d.snapshot().live_replicas == 10, 5)
    applied = [e for e in d.events if isinstance(e, Change) and e.setting == "replicas"]
    assert [c.new for c in applied] == [150, 10] and all(c.applied is not None for c in applied)
    with pytest.raises(ValueError, match="shapes how a job starts"):
        d.set(partitions=2)
    with pytest.raises(ValueError, match="replicas must be"):
        d.set(replicas=0)
    d.stop()
    report = d.report()
    assert validate_report(report) == [] and report["config"]["replicas"] == 10
    # every push counted by a replica was applied on all four shards; a lost replica's last push may have
    # landed without its answer ever coming back
    unanswered = sum(s["updates"] for s in report["shards"]) - 4 * sum(r["pushes"] for r in report["replicas"])
    assert unanswered in (0, 4)
    assert sim_threads() == []


def test_pause_holds_simulated_time_and_resume_lets_it_go_on(digits):
    with dbkit.DownpourSGD("linear", digits, cluster=AT_SCALE, replicas=20, shards=2, lr=0.05) as d:
        d.start()
        until(lambda: d.snapshot().step > 200)
        d.pause()
        first, params = d.snapshot(), d.parameters()
        time.sleep(0.3)
        second = d.snapshot()
        assert (second.t, second.step) == (first.t, first.step) and second.state == "paused"
        assert d.parameters().tobytes() == params.tobytes()
        assert {r.state for r in second.replicas} == {"paused"}  # as a real job's replicas say once held
        d.resume()
        until(lambda: d.snapshot().t > first.t and d.snapshot().step > first.step)
        until(lambda: "running" in {r.state for r in d.snapshot().replicas})


def test_sandblaster_as_a_job_matches_the_simulators_own_run(digits):
    cfg = RunConfig.make(algorithm="sandblaster", model="linear", replicas=4, shards=2, l2=1e-3, steps=6)
    whole = simulate(cfg, Cluster())
    with dbkit.SandblasterLBFGS("linear", digits, config=cfg, cluster=Cluster()) as job:
        job.fit(steps=3, progress=False)
        job.set(slow_replicas={1: 4.0})
        job.set(slow_replicas={})  # and back: the iterations' numbers do not depend on who computes
        job.fit(steps=3, progress=False)
        report = job.report()
    assert validate_report(report) == [] and report["steps"] == 6
    assert report["final"]["full_batch_loss"] == pytest.approx(whole["final"]["full_batch_loss"], rel=1e-9)


def test_a_diverging_simulated_run_ends_diverged_with_advice(digits):
    cfg = RunConfig.make(algorithm="downpour", replicas=2, shards=1, optimizer="sgd", lr=30.0, max_nonfinite=3)
    with dbkit.DownpourSGD("mlp", digits, config=cfg, cluster=Cluster()) as d:
        d.fit(steps=400, progress=False)
        assert d.state == "diverged" and d.snapshot().step < 400
        said = [e for e in d.events if isinstance(e, Divergence)]
        assert len(said) == 1 and "Lower the learning rate" in said[0].message and "adagrad" in said[0].message


def test_bad_arguments_are_refused_before_anything_starts(digits):
    with pytest.raises(ValueError, match="scheduler does not apply to a simulated cluster"):
        dbkit.DownpourSGD("linear", digits, cluster=Cluster(), scheduler="tcp://127.0.0.1:8786")
    with pytest.raises(ValueError, match="replicas must be"):
        dbkit.DownpourSGD("linear", digits, cluster=Cluster(), replicas=-1)
    d = dbkit.DownpourSGD("linear", digits, cluster=Cluster(), replicas=1)
    d.fit(steps=5, progress=False)
    with pytest.raises(ValueError, match="other than the last one"):
        d.lose_replica()
    d.stop()
    with pytest.raises(RuntimeError, match="was stopped"):
        d.set(lr=0.1)
    assert sim_threads() == []


def test_a_forgotten_simulated_job_stops_its_thread(digits):
    job = dbkit.DownpourSGD("linear", digits, cluster=Cluster(), replicas=2)
    job.start()
    deadline = time.monotonic() + 60
    while job.snapshot().step <= 10:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    del job
    # Collected again while waiting: a tick of the job's own loop may hold it for a moment when the first
    # collection runs, and a job in a reference cycle then waits for the next one.
    until(lambda: gc.collect() >= 0 and sim_threads() == [], 10)


def test_a_panel_on_a_simulated_job_reaches_the_clusters_size(digits):
    from dbkit.widgets import Panel

    job = dbkit.DownpourSGD("linear", digits, cluster=AT_SCALE, replicas=2, shards=4, lr=0.05)
    panel = Panel(job)
    assert panel.controls["replicas"].max == 200 and panel.controls["n_push"].max == 100
    assert "no Dask cluster" in panel.dashboard.value
    panel.buttons["start"].click()
    panel.wait_idle()
    panel.controls["replicas"].value = 150
    panel.wait_idle()
    assert job.snapshot().live_replicas == 150
    panel.controls["n_push"].value = 40
    panel.wait_idle()
    until(lambda: all(r.n_push == 40 for r in job.replicas() if r.live), 5)
    until(lambda: "simulated: profile distbelief-2012, 200 machines" in panel.status.value, 5)
    title = panel.figure.figure.get_suptitle
    until(lambda: "150 replicas" in title() and "n_push=40" in title(), 5)  # the title follows the sliders
    panel.buttons["pause"].click()
    panel.wait_idle()
    t = job.snapshot().t
    time.sleep(0.2)
    assert job.state == "paused" and job.snapshot().t == t and not math.isnan(t)
    job.stop()
    assert sim_threads() == [] and not [t for t in threading.enumerate() if t.name.startswith("dbkit-panel")]
    panel.close()


def running_with_a_straggler(digits, slow):
    """A simulated Downpour job of four replicas, replica ``slow`` sleeping 999 steps' time after each step,
    fit for an eighth of a simulated second (paused there)."""
    d = dbkit.DownpourSGD("linear", digits, cluster=Cluster(machines=8, profile="distbelief-2012"), replicas=4,
                          shards=2, lr=0.05, slow_replicas={slow: 1000.0}, eval_every=10**6)
    d.fit(seconds=0.125, progress=False)
    return d


def test_new_rates_on_a_running_simulation_are_answered_once_told_and_taken_at_each_replicas_next_step(digits):
    """A simulated job's ``set(n_push=...)`` answers once every replica's control holds the new rate (a few
    control messages of simulated time), and each replica takes it at its next step: a straggler that sleeps
    999 steps' time after each step takes it only then. Waiting for it, as a real job's ``set`` waits, would
    hold the answer that long (with 200 replicas, most of a second of this machine's time)."""
    d = running_with_a_straggler(digits, 0)
    began = d.snapshot().t
    d.set(n_push=9)
    told = d.snapshot().t - began
    before = {r.replica: r for r in d.replicas()}
    d.fit(seconds=4.0, progress=False)
    after = {r.replica: r for r in d.replicas()}
    d.stop()
    straggler_step = 4.0 / max(1, after[0].steps - before[0].steps)  # simulated seconds between its steps
    assert 0 < told < 0.01 < straggler_step
    assert all(f.n_push == 9 for f in after.values()) and after[0].steps > before[0].steps


def test_fewer_replicas_on_a_running_simulation_are_answered_at_once_and_the_leaving_end_removed(digits):
    """``set(replicas=2)`` on a simulated job of four answers once the newest two are told to stop: they count
    as gone at once and end ``removed`` at their next step, a straggler's in a simulated second."""
    d = running_with_a_straggler(digits, 3)
    began = d.snapshot().t
    d.set(replicas=2)
    told, live = d.snapshot().t - began, sorted(r.replica for r in d.replicas() if r.live)
    d.fit(seconds=5.0, progress=False)
    states = {r.replica: r.state for r in d.replicas()}
    d.stop()
    assert told < 0.01 and live == [0, 1]
    assert states == {0: "paused", 1: "paused", 2: "removed", 3: "removed"}


@pytest.mark.parametrize("settings", [dict(replicas=4, n_fetch=4, n_push=4), dict(replicas=3, slow_replicas={0: 3.0}),
                                      dict(replicas=6, slow_replicas={1: 2.0, 4: 5.0}, n_push=3)],
                         ids=["n4", "a-straggler", "two-stragglers"])
def test_a_simulated_fit_takes_the_steps_asked_over_all_replicas_however_they_differ(digits, settings):
    """The step budget shares what is left by the replicas' speeds while they run, keeping back what they may
    take before a new cap reaches them; the rest once they wait. (Before: 241 of 240 with n = 4, a replica
    polled at 59 steps having taken two more before its cap of 61 arrived.)"""
    with dbkit.DownpourSGD("mlp", digits, cluster=Cluster("here"), shards=2, lr=0.05, optimizer="adagrad",
                           eval_every=1000, **settings) as d:
        for steps, total in ((240, 240), (37, 277), (5, 282)):
            d.fit(steps=steps, progress=False)
            assert sum(r.steps for r in d.replicas()) == d.snapshot().step == total
