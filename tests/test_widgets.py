"""The control panel without a browser: its steering worker, its plots and status line, and a panel
bound to real jobs (an in-memory sync SGD, then a small Downpour on a LocalCluster) driven by setting
widget values and clicking buttons, as a browser's messages would."""

import html
import threading
import time

import numpy as np
import pytest

import dbkit
from dbkit import data
from dbkit.ps import Histogram
from dbkit.telemetry import ByteCounts, Change, Divergence, EventStream, Sample
from dbkit.training import Evaluation, ReplicaFigures
from dbkit.widgets import LiveFigure, Panel, RunSeries, Steering
from dbkit.widgets.status import BOKEH_HINT, dashboard_html, status_html, summary

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


def panel_threads():
    return [t.name for t in threading.enumerate() if t.name.startswith("dbkit-panel")]


def shown(panel):
    """The settings whose controls the panel shows (a knob of a rule or loop the job lacks is hidden)."""
    return {s for s, c in panel.controls.items() if c.layout.display != "none"}


def until(condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ---- the steering worker ---------------------------------------------------------------------
def test_steering_applies_in_order_and_a_quick_second_move_replaces_the_first():
    applied, actions, errors = [], [], []
    inside, go = threading.Event(), threading.Event()

    def apply(d):
        applied.append(dict(d))
        if d.get("lr") == 0.2:  # the worker is busy with this one until the test says go
            inside.set()
            go.wait(5)

    # quiet: long enough that a loaded machine does not apply the 2 between two lines of this test
    s = Steering(apply, actions.append, lambda r, e: errors.append((r, e)), quiet=1.0)
    s.want("n_push", 2)
    s.want("n_push", 5)  # before the worker reached the first: one change, the latest value
    s.want("lr", 0.1)
    assert s.pending() == {"n_push": 5, "lr": 0.1}
    assert s.wait_idle(5)
    assert applied == [{"n_push": 5, "lr": 0.1}]
    s.want("lr", 0.2)
    assert inside.wait(5)  # what is asked now waits behind it, whatever the machine's load (CI once raced here)
    s.want("n_push", 3)
    s.act("pause")
    s.want("n_push", 4)  # asked again after the pause, before the worker reached the 3: the 3 is never applied
    s.want("n_fetch", 2)
    go.set()
    assert s.wait_idle(5)
    assert applied[1:] == [{"lr": 0.2}, {"n_push": 4, "n_fetch": 2}] and actions == ["pause"]
    assert not errors and not [t for t in threading.enumerate() if t.name == "dbkit-panel-steering"]


def test_a_refused_request_is_reported_and_the_next_still_runs():
    applied, errors = [], []

    def apply(d):
        if d.get("n_push") == 0:
            raise ValueError("n_push must be a whole number in [1, 100000], got 0")
        applied.append(d)

    s = Steering(apply, lambda a: None, lambda r, e: errors.append((r.settings, str(e))), quiet=0.0)
    s.want("n_push", 0)
    s.wait_idle(5)
    s.want("n_push", 4)
    s.wait_idle(5)
    assert errors == [({"n_push": 0}, "n_push must be a whole number in [1, 100000], got 0")]
    assert applied == [{"n_push": 4}]
    s.close()
    s.want("n_push", 8)  # closed: nothing more runs
    time.sleep(0.1)
    assert applied == [{"n_push": 4}] and s.idle()


# ---- series, plots, status -------------------------------------------------------------------
def _stream(n=20, change_at=10):
    ticks = iter(np.arange(0, 1000, 0.5))
    events = EventStream(clock=lambda: next(ticks))
    for i in range(n):
        replicas = tuple(ReplicaFigures(r, examples=i * 100 * (r + 1), steps=i * 3) for r in range(2))
        events.emit(Sample, step=i * 6, examples=i * 300, examples_per_second=600.0, batch_loss=2.0 / (i + 1),
                    live_replicas=2, replicas=replicas, bytes=ByteCounts(i * 4000, i * 2000),
                    staleness=Histogram((0, 1, 3), (5, 3, 1)), staleness_examples=Histogram((32, 96), (4, 5)),
                    evaluation=Evaluation(1.0, 1.5 / (i + 1), 0.5 + i / 50) if i % 5 == 0 else None)
        if i == change_at:
            now = events.now()  # one request of two settings: applied together, as Job does
            events.emit(Change, setting="n_push", old=1, new=4, asked=now - 0.1, applied=now)
            events.emit(Change, setting="n_fetch", old=1, new=4, asked=now - 0.1, applied=now)
    return events


def test_a_run_series_reads_rates_bytes_evaluations_and_changes_off_the_stream():
    events = _stream()
    run = RunSeries("r", "downpour")
    assert run.update(events) and not run.update(events)  # nothing new the second time
    assert len(run.t) == 20 and len(run.eval_t) == 4
    assert run.replica_rates[1][1][-1] == pytest.approx(200 / (run.t[-1] - run.t[-2]))
    assert run.fetched[-1] == pytest.approx(4000 / (run.t[-1] - run.t[-2])) and run.fetched[0] == 0
    [marker] = run.markers  # two settings changed together: one line
    assert marker.label == "n_push 1→4, n_fetch 1→4" and marker.step == 60


def test_the_live_figure_draws_pngs_and_redraws_the_whole_figure_only_when_it_must():
    events, run = _stream(n=40), RunSeries("run 1", "downpour")
    fig = LiveFigure("downpour")
    frames = []
    for i in range(1, 41):
        run.update(_prefix(events, i))
        frames.append(fig.draw(run, []))
    assert all(f.startswith(PNG) for f in frames)
    assert frames[5] != frames[6]  # new samples show
    assert fig.full_draws < 15  # limits grow in round steps: most frames only blit the lines
    past = run
    second = RunSeries("run 2", "downpour")
    second.update(_prefix(events, 3))
    png = fig.draw(second, [past])
    assert png.startswith(PNG) and len(fig.ax_loss.lines) > 2  # the first run, faded, under the second


def test_hundreds_of_versions_of_staleness_show_as_bars_whose_fractions_add_up():
    """200 simulated replicas push hundreds of versions stale: one bar per version would be hairlines of
    a fraction of a percent each; the panel bins them (a reference: the counts summed by hand)."""
    from dbkit.widgets.detail import bin_width

    counts = {v: 1 + v % 7 for v in range(300, 520)}
    fig = LiveFigure("downpour")
    run = RunSeries("r", "downpour", staleness=Histogram.of(counts), staleness_examples=Histogram.of({32: 1}))
    fig.detail.update(run)
    bars = [a for a in fig.detail.artists() if hasattr(a, "get_height")]
    assert fig.detail.ax.get_xlim()[1] == pytest.approx(999.6)  # the axis reaches 1000 versions: 50 a bar
    assert len(bars) == 5 and [b.get_width() for b in bars] == [40.0] * 5
    assert sum(b.get_height() for b in bars) == pytest.approx(1.0)
    by_hand = sum(c for v, c in counts.items() if 400 <= v < 450) / sum(counts.values())
    assert [b.get_height() for b in bars if b.get_x() < 425 < b.get_x() + b.get_width()] == [pytest.approx(by_hand)]
    assert bin_width(30) == 1 and bin_width(41) == 2


def test_a_diverging_run_runs_off_the_loss_plot_instead_of_breaking_it():
    events = _stream(n=10)
    for loss in (1e30, 1e300, float("inf")):  # what six SGD replicas at a large rate produce
        events.emit(Sample, step=100, examples=1000, examples_per_second=600.0, batch_loss=loss, live_replicas=2,
                    replicas=(), bytes=ByteCounts(0, 0), staleness=Histogram(), staleness_examples=Histogram(),
                    evaluation=Evaluation(loss, loss, 0.1))
        events.emit(Divergence, step=100, message="non-finite")
    run, fig = RunSeries("run", "downpour"), LiveFigure("downpour")
    run.update(events)
    assert fig.draw(run, []).startswith(PNG)
    low, high = fig.ax_loss.get_ylim()
    assert 0 < low and high <= 1e5 and run.markers[-1].label.endswith("diverged")


def test_the_target_accuracy_is_a_line_and_its_first_reach_a_marker():
    events = _stream(n=20)  # evaluations at samples 0, 5, 10, 15: accuracy 0.5, 0.6, 0.7, 0.8
    run = RunSeries("run", "downpour", target=0.65)
    run.update(events)
    reached = [m for m in run.markers if "65%" in m.label]
    assert len(reached) == 1 and run.reached == run.eval_t[2] and reached[0].t == run.eval_t[2]
    fig = LiveFigure("downpour")
    fig.draw(run, [])
    assert any(list(line.get_ydata()) == [0.65, 0.65] for line in fig.ax_acc.lines)
    assert not RunSeries("run", "downpour").markers


def _prefix(events, k):
    """A stream holding the first ``k`` samples of ``events`` (and what came between)."""
    out = EventStream()
    for e in events:
        if isinstance(e, Sample) and e.step >= 6 * k:
            break
        out._events.append(e)
    return out


def test_the_sandblaster_timeline_draws(digits):
    from dbkit.sandblaster import UnitRecord
    from dbkit.telemetry import BatchDone

    events = EventStream()
    units = (UnitRecord(0, 0, 0.0, 0.5, False, True), UnitRecord(1, 1, 0.0, 0.2, False, True),
             UnitRecord(1, 2, 0.2, 0.4, True, True), UnitRecord(0, 2, 0.1, None, False, False))
    events.emit(BatchDone, batch=1, seconds=0.5, loss=1.0, units=units)
    run = RunSeries("sb", "sandblaster")
    run.update(events)
    fig = LiveFigure("sandblaster")
    assert fig.draw(run, []).startswith(PNG) and len(fig.detail.artists()) == 5  # (replica, kind) groups + a caption


def test_status_and_dashboard_lines_say_what_happened_in_words(digits):
    job = dbkit.SyncSGD("linear", digits, lr=0.05)
    snap = job.snapshot()
    assert "created" in status_html(snap) and "appears when the job starts" in dashboard_html(snap)
    job.fit(steps=20, progress=False)
    job.set(lr=0.1)
    snap = job.snapshot()
    text = status_html(snap)
    assert "paused" in text and "lr 0.05→0.1: applied" in text
    assert "refused" in status_html(snap, "refused lr=-1: lr must be", error=True)
    assert dashboard_html(snap) == "in memory: no Dask cluster, no dashboard"
    job.stop()
    from dataclasses import replace

    assert dashboard_html(replace(snap, algorithm="downpour")) == html.escape(BOKEH_HINT)
    assert "href='http://127.0.0.1:8787/status'" in dashboard_html(replace(snap, dashboard="http://127.0.0.1:8787/status"))
    aimed = replace(snap, config=snap.config.replace(target_accuracy=0.6))
    assert "target 60%" in status_html(aimed) and "60% reached at 2.5 s" in status_html(aimed, reached=2.5)
    assert "%" not in summary(snap)


# ---- a panel on an in-memory sync SGD job (no Dask) ---------------------------------------------
def test_the_status_line_refreshes_on_its_own_cadence_between_frames(digits):
    """Status every ``status_every`` seconds, frames every ``refresh``: the words do not wait for the plots."""
    job = dbkit.SyncSGD("linear", digits, lr=0.05, seconds=60)
    panel = Panel(job, refresh=3600.0, status_every=0.05)
    try:
        until(lambda: panel.refreshes >= 2)  # the refresh thread's first tick: its frame is due (nothing new yet)
        job.start()
        until(lambda: job.snapshot().step > 20)
        refreshes, frames, words = panel.refreshes, panel.frames, panel.status.value
        until(lambda: panel.refreshes >= refreshes + 8 and panel.status.value != words)  # the steps go up
        assert panel.frames == frames  # events came all along, but no frame was due
        panel.say("a note")  # a note wakes the thread: the frame is drawn now, not an hour later
        until(lambda: panel.frames > frames)
    finally:
        job.stop()
        panel.close()
    with pytest.raises(ValueError, match="positive"):
        Panel(job, status_every=0)


def test_a_panel_steers_an_in_memory_job_and_starts_a_new_run_after_stop(digits):
    job = dbkit.SyncSGD("linear", digits, lr=0.05, seconds=60)
    panel = job.panel()
    assert job.panel() is panel and dbkit.widgets.panel(job) is panel
    assert shown(panel) == {"lr", "optimizer"} and panel.png().startswith(PNG)
    panel.buttons["start"].click()
    panel.wait_idle()
    until(lambda: job.snapshot().step > 50)
    panel.controls["optimizer"].value = "adagrad"
    panel.controls["lr"].value = 0.2
    panel.wait_idle()
    assert (job.config.optimizer, job.config.lr) == ("adagrad", pytest.approx(0.2))
    until(lambda: shown(panel) == {"lr", "optimizer", "eps", "initial_accumulator"})  # Adagrad's own knobs
    panel.buttons["pause"].click()
    panel.wait_idle()
    assert job.state == "paused"
    until(lambda: not panel.buttons["resume"].disabled and panel.buttons["pause"].disabled)
    frames = panel.frames
    panel.buttons["resume"].click()
    until(lambda: panel.frames >= frames + 2)  # the plots refresh while it trains
    bundle = panel._repr_mimebundle_()
    assert bundle["image/png"] and "application/vnd.jupyter.widget-view+json" in bundle
    assert "dbkit panel" in bundle["text/plain"]

    panel.buttons["stop"].click()
    panel.wait_idle()
    assert job.stopped and panel_threads() == []  # job.stop() ends the panel's threads
    panel.controls["optimizer"].value = "sgd"  # the run is over: kept for the next run
    panel.wait_idle()
    assert "next run" in panel.note and job.config.optimizer == "adagrad"
    panel.buttons["start"].click()
    panel.wait_idle()
    second = panel.job
    assert second is not job and second.state == "running" and second.config.optimizer == "sgd"
    assert second.panel() is panel and len(panel.past) == 1
    panel.close()
    second.stop()
    assert panel_threads() == [] and second.attached_panel is None


# ---- a panel on a small Downpour job on a LocalCluster ----------------------------------------
@pytest.mark.cluster
def test_a_panel_steers_a_running_downpour_job(digits, local_cluster):
    job = dbkit.DownpourSGD("mlp", digits, replicas=2, shards=2, optimizer="adagrad", lr=0.05, seconds=120,
                            client=local_cluster.client)
    panel = Panel(job)
    assert set(panel.controls) >= {"replicas", "partitions", "shards", "n_fetch", "n_push", "lr", "optimizer",
                                   "warm_start_steps"}
    panel.buttons["start"].click()
    panel.wait_idle()
    until(lambda: job.state == "running" and job.snapshot().step > 20)
    assert "Dask dashboard" in panel.dashboard.value

    panel.controls["replicas"].value = 3
    panel.wait_idle()
    assert job.snapshot().live_replicas == 3
    until(lambda: "replicas 2→3" in panel.status.value or "replicas=3 applied" in panel.status.value, 5)

    seq = len(job.events)
    panel.controls["n_push"].value = 2
    panel.controls["n_push"].value = 5  # two quick moves: one change
    panel.wait_idle()
    pushes = [e for e in job.events.since(seq - 1) if isinstance(e, Change) and e.setting == "n_push"]
    assert [(c.new, c.superseded) for c in pushes] == [(5, False)]
    until(lambda: all(r.n_push == 5 for r in job.replicas() if r.live), 5)  # seen in the replicas' figures

    panel.controls["partitions"].value = 2
    panel.wait_idle()
    assert job.layout.partitions == 2 and job.snapshot().live_replicas == 3
    panel.controls["partitions"].value = 3  # needs 3 shards: refused, the slider goes back to 2
    panel.wait_idle()
    until(lambda: "refused" in panel.status.value, 5)
    assert "shards must be at least partitions" in panel.status.value and panel.controls["partitions"].value == 2
    assert job.layout.partitions == 2

    panel.straggler.factor.value = 6.0  # slow replica 0 by 6
    panel.wait_idle()
    assert dict(job.config.slow_replicas) == {0: 6.0}
    panel.buttons["lose a replica"].click()
    panel.wait_idle()
    assert job.snapshot().live_replicas == 2 and "lost" in panel.note

    panel.buttons["pause"].click()
    panel.wait_idle()
    assert job.state == "paused"
    frames = panel.frames
    panel.buttons["resume"].click()
    panel.wait_idle()
    until(lambda: panel.frames >= frames + 2)
    job.stop()  # closes the panel's threads; its last frame stays
    assert panel_threads() == [] and panel.png().startswith(PNG)
    panel.close()


@pytest.mark.cluster
def test_a_panel_steers_sandblaster_between_batches_and_draws_its_timeline(digits, local_cluster):
    job = dbkit.SandblasterLBFGS("linear", digits, replicas=2, shards=2, work_unit_size=100, l2=1e-3,
                                 iterations=400, client=local_cluster.client)
    panel = job.panel()
    assert set(panel.controls) == {"replicas", "work_unit_size", "backup", "balance"}
    assert set(panel.buttons) == {"start", "stop"}
    panel.buttons["start"].click()
    panel.wait_idle()
    until(lambda: panel.run.batch is not None)  # a BatchDone reached the plots
    panel.controls["backup"].value = False
    panel.controls["work_unit_size"].value = 200
    panel.straggler.factor.value = 4.0
    panel.wait_idle()
    c = job.config
    assert (c.sandblaster.backup, c.sandblaster.work_unit_size, dict(c.slow_replicas)) == (False, 200, {0: 4.0})
    until(lambda: panel.run.batch is not None and all(not u.backup for u in panel.run.batch.units)
          and panel.run.batch.batch > 2)
    frames = panel.frames
    until(lambda: panel.frames > frames)
    panel.buttons["stop"].click()
    panel.wait_idle()
    assert job.stopped and panel_threads() == []
    panel.close()


def test_an_executed_notebook_keeps_the_panels_last_frame_as_a_picture(tmp_path):
    """What GitHub and nbconvert show: the panel's output carries a PNG and a text summary, and
    ``job.stop()`` in a later cell updates that output to the last frame."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in (
        "import dbkit\njob = dbkit.SyncSGD('linear', 'digits', lr=0.05)\njob.panel()",
        "job.fit(steps=300, progress=False)\njob.stop()")]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    [out] = nb.cells[0].outputs
    assert out.output_type == "display_data" and "display_id" in out.get("transient", {}) or out.metadata is not None
    data = out["data"]
    assert {"image/png", "text/plain", "application/vnd.jupyter.widget-view+json"} <= set(data)
    assert "dbkit panel" in data["text/plain"] and "stopped" in data["text/plain"]  # updated at stop()
    import base64

    assert base64.b64decode(data["image/png"]).startswith(PNG)


def test_which_buttons_may_be_pressed_in_each_state():
    from dbkit.widgets.panel_widgets import pressable

    def on(state, stopped=False, live=3):
        return sorted(k for k, v in pressable(state, stopped, live).items() if v)

    assert on("created", live=0) == ["start"]
    assert on("running") == ["lose a replica", "pause", "stop"]
    assert on("running", live=1) == ["pause", "stop"]  # losing the only replica would end training
    assert on("paused") == ["lose a replica", "resume", "stop"]
    assert on("finished") == ["start", "stop"] and on("finished", stopped=True) == ["start"]


def _steady_with_a_burst(rate=20_000.0, every=0.05, n=60, burst_at=30):
    """A simulated panel's samples: ``rate`` examples per simulated second, one sample every ``every``
    simulated seconds, and after a change a sample only 1e-6 s later carrying a catch-up burst of a
    whole interval's examples (what made one-frame spikes of 1e7-1e9 on lesson 08's panel)."""
    times, counts, t, c = [], [], 0.0, 0
    for i in range(n):
        t += 1e-6 if i == burst_at else every
        c += int(rate * every)
        times.append(t)
        counts.append(c)
    return times, counts


def test_a_catch_up_burst_stays_near_the_steady_rate_once_smoothed():
    from dbkit.telemetry import trailing_rate

    times, counts = _steady_with_a_burst()
    raw = [(counts[i] - counts[i - 1]) / (times[i] - times[i - 1]) for i in range(1, len(times))]
    assert max(raw) > 1e8  # the spike, as a per-sample rate shows it
    smoothed = [trailing_rate(times[:i + 1], counts[:i + 1]) for i in range(1, len(times))]
    assert all(20_000 / 1.5 < r < 20_000 * 1.5 for r in smoothed[8:]), smoothed
    # and through the panel's series, on the status line too
    now = [0.0]
    events = EventStream(clock=lambda: now[0], origin=0.0)
    for t, c, sample_rate in zip(times, counts, [0.0, *raw]):  # each sample's own rate, spike included
        now[0] = t
        events.emit(Sample, step=c // 32, examples=c, examples_per_second=sample_rate, batch_loss=1.0, live_replicas=4,
                    replicas=(), bytes=ByteCounts(c * 10, c * 10), staleness=Histogram(),
                    staleness_examples=Histogram())
    run = RunSeries("r", "downpour")
    run.update(events)
    assert max(run.rate[8:]) < 20_000 * 1.5 and max(run.fetched[8:]) < 200_000 * 1.5
    assert run.per_replica[-1] == pytest.approx(run.rate[-1] / 4)


def test_the_staleness_axis_follows_the_data_down_as_well_as_up():
    """Lesson 08's panel after 200 replicas went back to a few: the axis stayed at 400-450 versions while
    the pushes sat at 0-11. Now each window's range is on the axis, and the axis is not much wider."""
    fig = LiveFigure("downpour")
    for counts in ({v: 3 for v in range(380, 431)}, {v: 5 for v in range(0, 12)}, {2: 1, 7: 4}):
        run = RunSeries("r", "downpour", staleness=Histogram.of(counts), staleness_examples=Histogram.of({32: 1}))
        fig.detail.update(run)
        low, high = fig.detail.ax.get_xlim()
        assert low <= min(counts) and max(counts) <= high <= 2.5 * (max(counts) + 1), (counts, high)


def test_a_run_whose_accuracy_falls_after_a_change_says_so_on_the_status_line():
    events = _stream(n=20)  # accuracy 0.5, 0.6, 0.7, 0.8 at samples 0, 5, 10, 15; n_push 1->4 at sample 10
    for acc in (0.75, 0.55):
        events.emit(Sample, step=200, examples=9000, examples_per_second=600.0, batch_loss=1.0, live_replicas=2,
                    replicas=(), bytes=ByteCounts(0, 0), staleness=Histogram(), staleness_examples=Histogram(),
                    evaluation=Evaluation(1.0, 1.0, acc))
    run = RunSeries("r", "downpour")
    run.update(_prefix(events, 19))
    assert run.setback() is None  # still climbing
    run.update(events)
    line = run.setback()
    assert line is not None and "fell from 0.80 to 0.55 after n_push 1→4, n_fetch 1→4" in line


def test_a_panel_whose_job_runs_on_keeps_its_latest_frame_as_its_picture(digits):
    """A lesson's panel job runs on after Run All; a saved (rendered) copy must show the panel as it is
    then, not its first, empty frame (issue #44)."""
    job = dbkit.SyncSGD("linear", digits, lr=0.05, seconds=60)
    try:
        panel = job.panel()
        first = panel.png()
        job.start()
        until(lambda: job.snapshot().step > 50 and panel.frames >= 2)
        assert dbkit.widgets.keep_last_frames() == 1
        assert panel.png() != first and "step 0 " not in panel.text()
    finally:
        job.stop()
    assert dbkit.widgets.keep_last_frames() == 0  # a stopped job's panel kept its last frame when it stopped
