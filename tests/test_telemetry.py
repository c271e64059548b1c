"""The JSON report of DESIGN.md, its writer, the event stream and the sampler's windows."""

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from dbkit.ps import Histogram, ShardFigures
from dbkit.telemetry import (
    ByteCounts,
    Change,
    EventStream,
    RunRecord,
    Sample,
    Sampler,
    StateChange,
    TimeToAccuracy,
    build_report,
    validate_report,
    write_report,
)
from dbkit.training import Evaluation, ReplicaFigures

PNG = b"\x89PNG\r\n\x1a\n"
FINAL = Evaluation(train_loss=0.1, test_loss=0.2, test_accuracy=0.9, full_batch_loss=0.1)


def _record(**changes) -> RunRecord:
    base = dict(
        algorithm="sgd", state="stopped", config={"lr": 0.1}, wall_seconds=3.0, train_seconds=2.0, final=FINAL,
        history=[{"t": 0.0, "step": 0, "train_loss": 2.3, "test_accuracy": 0.1}],
        replicas=(ReplicaFigures(0, steps=10, pushes=10, fetches=10, examples=320),),
        shards=(ShardFigures(0, 0, 5, version=10, fetches=10, rejected=0, optimizer="sgd", lr=0.1, bytes_fetched=200,
                             bytes_pushed=200, examples=320, staleness=Histogram.of({0: 10})),),
        bytes=ByteCounts(200, 200), model={}, dataset={}, cluster={"kind": "none"}, events=[])
    return RunRecord(**{**base, **changes})


def test_a_built_report_is_whole():
    r = build_report(_record())
    assert validate_report(r) == []
    assert r["examples_per_second"] == pytest.approx(160.0)
    assert r["shards"][0]["size"] == 5 and r["shards"][0]["updates"] == 10
    assert r["shards"][0]["staleness"] == {"count": 10, "mean": 0.0, "p50": 0, "p95": 0, "max": 0}


@pytest.mark.parametrize("breaker,problem", [
    (lambda r: r.pop("bytes"), "missing 'bytes'"),
    (lambda r: r["final"].pop("full_batch_loss"), "final lacks 'full_batch_loss'"),
    (lambda r: r["history"][0].pop("test_accuracy"), "history[0] lacks 'test_accuracy'"),
    (lambda r: r["shards"][0]["staleness"].pop("p95"), "staleness lacks 'p95'"),
    (lambda r: r["replicas"].clear(), "'replicas' is empty"),
])
def test_validate_names_what_is_missing(breaker, problem):
    r = build_report(_record())
    breaker(r)
    assert any(problem in p for p in validate_report(r))


def test_write_report_is_strict_json(tmp_path):
    r = build_report(_record(config={"x": np.int64(3), "arr": np.arange(2)},
                             final=Evaluation(0.1, float("nan"), 0.9, 0.1)))
    path = write_report(r, tmp_path / "sub" / "r.json")
    loaded = json.loads(path.read_text())
    assert loaded["final"]["test_loss"] is None and loaded["config"]["arr"] == [0, 1]
    assert not (tmp_path / "sub" / "r.json.tmp").exists()


def test_event_stream_numbers_events_and_serves_pollers():
    clock = iter(range(100)).__next__
    events = EventStream(clock=clock)
    a = events.emit(StateChange, state="running")
    b = events.emit(Change, setting="lr", old=0.1, new=0.2, asked=1.0, applied=2.0)
    assert (a.seq, b.seq) == (0, 1) and a.t < b.t
    assert events.since(-1) == [a, b] and events.since(0) == [b] and events.since(1) == []
    assert events.of(Change) == [b] and events.last(StateChange) is a and events.last() is b
    assert events.to_dicts()[1] == {"type": "Change", "seq": 1, "t": b.t, "setting": "lr", "old": 0.1, "new": 0.2,
                                    "asked": 1.0, "applied": 2.0, "superseded": False}


def test_event_stream_is_safe_to_append_from_many_threads():
    events = EventStream()

    def emit():
        for _ in range(500):
            events.emit(StateChange, state="running")

    threads = [threading.Thread(target=emit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e.seq for e in events] == list(range(2000))


def test_samples_give_the_window_not_the_lifetime():
    events = EventStream(clock=iter(range(100)).__next__)
    sampler = Sampler()
    r0 = ReplicaFigures(0, steps=10, examples=320, staleness=Histogram.of({0: 10}), age=Histogram.of({32: 10}))
    first = sampler.emit(events, {0: r0})
    assert first.staleness.count == 10 and first.examples == 320
    r1 = r0.but(steps=20, examples=640, staleness=Histogram.of({0: 10, 5: 10}), age=Histogram.of({32: 10, 512: 10}))
    second = sampler.emit(events, {0: r1}, evaluation=FINAL)
    assert second.staleness == Histogram((5,), (10,)) and second.staleness_examples == Histogram((512,), (10,))
    assert second.step == 20 and second.examples_per_second > 0 and second.evaluation is FINAL
    assert second.rates(first) == {0: pytest.approx(320 / (second.t - first.t))}  # per replica
    assert events.of(Sample) == [first, second]


def test_partition_picture_marks_only_what_crosses(tmp_path):
    from dbkit import nn
    from dbkit.partition import ownership
    from dbkit.telemetry import plot_partitions
    from dbkit.telemetry.partition_plot import _sent_units

    net = nn.build("image-local", 64, 10, image_shape=(8, 8))  # 6x6x8 -> 4x4x8 -> dense
    # by hand: layer 2's row bands {0,1} and {2,3} read rows 0-3 and 2-5 of layer 0's output,
    # whose owners are rows {0,1,2} and {3,4,5}: only rows 2 and 3 cross
    sent = _sent_units(ownership(net, 2), 0)
    assert sorted(set((sent // 8) // 6)) == [2, 3]
    assert _sent_units(ownership(net, 2), 2).size == 4 * 4 * 8  # the dense layer reads everything
    fig = plot_partitions(net, 2, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000 and len(fig.axes) == 3


# ---- time to accuracy, comparisons, summaries --------------------------------------------------------
HISTORY = [{"t": 0.0, "step": 0, "test_accuracy": 0.1}, {"t": 1.5, "step": 100, "test_accuracy": 0.55},
           {"t": 3.0, "step": 200, "test_accuracy": 0.5}, {"t": 4.5, "step": 300, "test_accuracy": 0.72}]


def test_time_to_accuracy_is_the_first_evaluation_at_or_above_the_target():
    from dbkit.telemetry import LADDER, time_to_accuracy, times_to_accuracy

    assert time_to_accuracy(HISTORY, 0.55) == TimeToAccuracy(0.55, 1.5, 100)
    assert time_to_accuracy(HISTORY, 0.7).step == 300  # the dip at step 200 does not count as reaching 0.55 late
    assert not time_to_accuracy(HISTORY, 0.9).reached
    ladder = times_to_accuracy(HISTORY, target=0.65)
    assert [t.target for t in ladder] == sorted({*LADDER, 0.65})
    assert [t.step for t in ladder if t.target <= 0.7] == [100, 100, 100, 300, 300, 300]
    with pytest.raises(ValueError, match="target accuracy"):
        time_to_accuracy(HISTORY, 1.5)


def test_the_report_gives_time_to_the_ladder_and_to_the_configured_target():
    r = build_report(_record(history=HISTORY, config={"target_accuracy": 0.65}))
    by_target = {t["target"]: t for t in r["time_to_accuracy"]}
    assert by_target[0.65] == {"target": 0.65, "seconds": 4.5, "step": 300}
    assert by_target[0.99]["seconds"] is None
    assert json.loads(json.dumps(r["time_to_accuracy"])) == r["time_to_accuracy"]


def _report(history, events=(), state="stopped", staleness=None):
    shards = [{"updates": 30, "staleness": {"mean": 1.0}, "staleness_examples": {"mean": 32.0}},
              {"updates": 10, "staleness": {"mean": 5.0}, "staleness_examples": {"mean": 160.0}}]
    return {"state": state, "steps": 300, "examples_per_second": 1000.0, "config": {"target_accuracy": 0.5},
            "final": {"test_accuracy": history[-1]["test_accuracy"], "full_batch_loss": 0.9}, "history": history,
            "shards": shards, "bytes": {"fetched": 2e6, "pushed": 1e6, "between_partitions": 0},
            "events": list(events)}


def test_summaries_weight_staleness_by_updates_and_read_divergence():
    from dbkit.telemetry import SummaryTable, summarize

    s = summarize(_report(HISTORY))
    assert s.staleness == pytest.approx((30 * 1 + 10 * 5) / 40) and s.staleness_examples == pytest.approx(64.0)
    assert s.seconds_to_target == 1.5 and s.megabytes == 3.0 and s.diverged_at is None
    diverged = _report(HISTORY[:2], events=[{"type": "Divergence", "t": 1.2}], state="diverged")
    table = SummaryTable({"fine": _report(HISTORY), "blown up": diverged}, target=0.6)
    assert table["blown up"].diverged_at == 1.2 and table["fine"].seconds_to_target == 4.5
    assert "diverged" in str(table) and "<table>" in table._repr_html_() and "4.5 s to 60%" in str(table)


def test_comparison_charts_draw_runs_divergence_lost_replicas_and_timelines(tmp_path: Path):
    from dbkit.sandblaster import UnitRecord
    from dbkit.telemetry import BatchDone, compare_runs, plot_lines, plot_timelines

    lost = [{"type": "ReplicaEvent", "t": 2.0, "replica": 1, "what": "lost"}]
    runs = {"a": _report(HISTORY, events=lost), "b": _report(HISTORY[:2], [{"type": "Divergence", "t": 1.2}])}
    chart = compare_runs(runs, target=0.6, title="two runs")
    assert chart.png()[:8] == PNG and repr(chart) == "<Chart 'two runs'>"
    left, bars = chart.figure.axes
    assert [p.get_width() for p in bars.patches] == [4.5, 0.0]  # b never reached 60%: it diverged
    assert any("lost" in t.get_text() for t in left.texts) and any("diverged" in t.get_text() for t in left.texts)
    assert compare_runs(runs, x="step")._repr_png_()[:8] == PNG
    with pytest.raises(ValueError, match="3 values for 2"):
        plot_lines([1, 2], {"y": [1, 2, 3]}, "x", "y")
    units = (UnitRecord(0, 0, 0.0, 0.5, False, True), UnitRecord(1, 1, 0.0, 0.2, False, True))
    batch = BatchDone(seq=0, t=1.0, batch=1, seconds=0.5, loss=1.0, units=units)
    assert plot_timelines({"one": batch, "two": batch}).save(tmp_path / "t.png").exists()


def test_a_real_and_a_simulated_run_share_a_chart_and_the_simulated_one_says_so():
    from dbkit.telemetry import compare_runs

    simulated = dict(_report([dict(h, t=h["t"] / 10) for h in HISTORY]), simulated=True, profile="here")
    chart = compare_runs({"real": _report(HISTORY), "same settings": simulated}, target=0.6)
    left, bars = chart.figure.axes
    real_line, simulated_line = left.get_lines()[:2]
    assert real_line.get_label() == "real" and real_line.get_linestyle() == "-"
    assert simulated_line.get_label() == "same settings (simulated, profile here)"
    assert simulated_line.get_linestyle() == "--"
    assert left.get_xlabel() == "seconds (simulated seconds for dashed lines)"
    assert [p.get_width() for p in bars.patches] == [4.5, 0.45]
    assert [t.get_text() for t in bars.texts] == [" 4.5 s", " 0.45 simulated s"]
    assert [t.get_text() for t in bars.get_yticklabels()] == ["real", "same settings (simulated, profile here)"]
    only_simulated = compare_runs({"sim": simulated}).figure.axes[0]
    assert only_simulated.get_xlabel() == "simulated seconds"


def _asdict_reference(event):
    """What ``Event.to_dict`` gave before: ``dataclasses.asdict`` (deep copies), then tuples as lists and
    keys as strings."""
    import dataclasses

    def plain(value):
        if isinstance(value, dict):
            return {str(k): plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return {"type": type(event).__name__, **plain(dataclasses.asdict(event))}


def test_every_event_kind_gives_the_dict_asdict_gave():
    from dbkit.sandblaster.records import LostReplica, UnitRecord
    from dbkit.telemetry.events import BatchDone, Checkpointed, Relayout, ShardLost, WorkerHung

    shard = _record().shards[0]
    events = [
        Sample(0, 1.0, step=5, examples=160, examples_per_second=80.0, batch_loss=None, live_replicas=1,
               replicas=_record().replicas, bytes=ByteCounts(1, 2, 3, 4), staleness=Histogram.of({0: 3, 2: 1}),
               staleness_examples=Histogram.of({}), evaluation=FINAL),
        Change(1, 2.0, setting="lr", old={"a": (1, 2)}, new=[0.5, None], asked=1.5, applied=None),
        StateChange(2, 3.0, state="paused", reason="asked"),
        BatchDone(3, 4.0, batch=1, seconds=0.5, loss=2.5, units=(UnitRecord(0, 3, 0.0, None, False, False),
                                                                UnitRecord(1, 3, 0.1, 0.2, True, True)),
                  lost=(LostReplica(1, 1, "gone"),)),
        ShardLost(4, 5.0, shard=0, worker="w", step=9, checkpoint_version=3),
        WorkerHung(5, 6.0, worker="w", silent=12.0, shards=(0, 1)),
        Checkpointed(6, 7.0, directory="/c", step=9, versions=(3, 4)),
        Relayout(7, 8.0, step=9, partitions=2, shards=2, shards_before=(shard,)),
    ]
    for e in events:
        assert e.to_dict() == _asdict_reference(e)
    assert json.loads(json.dumps([e.to_dict() for e in events])) == [e.to_dict() for e in events]
