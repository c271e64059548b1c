"""The JSON report contract of DESIGN.md, its writer, and the event log."""

import json

import numpy as np
import pytest

from dbkit.telemetry import EventLog, build_report, validate_report, write_report


def _summary():
    return {
        "algorithm": "sgd", "steps": 10, "examples": 320, "train_seconds": 2.0,
        "history": [{"t": 0.0, "step": 0, "train_loss": 2.3, "test_accuracy": 0.1}],
        "replicas": [{"replica": 0, "steps": 10, "pushes": 10, "fetches": 10, "examples": 320, "failures": 0}],
        "shards": [{"worker": "w", "size": 5, "updates": 10, "rejected": 0,
                    "staleness": {"mean": 0.0, "p50": 0, "p95": 0, "max": 0}}],
        "bytes": {"fetched": 200, "pushed": 200, "between_partitions": 0, "between_partitions_min": 0},
    }


FINAL = {"train_loss": 0.1, "test_loss": 0.2, "test_accuracy": 0.9, "full_batch_loss": 0.1}


def test_a_built_report_is_whole():
    r = build_report(_summary(), {"lr": 0.1}, FINAL, wall_seconds=3.0)
    assert validate_report(r) == []
    assert r["examples_per_second"] == pytest.approx(160.0)


@pytest.mark.parametrize("breaker,problem", [
    (lambda r: r.pop("bytes"), "missing 'bytes'"),
    (lambda r: r["final"].pop("full_batch_loss"), "final lacks 'full_batch_loss'"),
    (lambda r: r["history"][0].pop("test_accuracy"), "history[0] lacks 'test_accuracy'"),
    (lambda r: r["shards"][0]["staleness"].pop("p95"), "staleness lacks 'p95'"),
    (lambda r: r["replicas"].clear(), "'replicas' is empty"),
])
def test_validate_names_what_is_missing(breaker, problem):
    r = build_report(_summary(), {}, FINAL, 1.0)
    breaker(r)
    assert any(problem in p for p in validate_report(r))


def test_write_report_is_strict_json(tmp_path):
    r = build_report(_summary(), {"x": np.int64(3), "arr": np.arange(2)}, {**FINAL, "test_loss": float("nan")}, 1.0)
    path = write_report(r, tmp_path / "sub" / "r.json")
    loaded = json.loads(path.read_text())
    assert loaded["final"]["test_loss"] is None and loaded["config"]["arr"] == [0, 1]
    assert not (tmp_path / "sub" / "r.json.tmp").exists()


def test_event_log_totals():
    log = EventLog(keep=2)
    log.record("fetch", bytes=100)
    log.record("push", bytes=40, staleness=[0, 2])
    log.record("push", bytes=40, staleness=[1, None])
    s = log.summary()
    assert s["counts"] == {"fetch": 1, "push": 2} and s["bytes"] == {"fetch": 100, "push": 80}
    assert s["staleness"]["count"] == 3 and s["staleness"]["max"] == 2
    assert len(log.events) == 2 and len(log.of_kind("push")) == 2


def test_partition_picture_marks_only_what_crosses(tmp_path):
    from dbkit import nn
    from dbkit.partition import plan
    from dbkit.telemetry import plot_partitions
    from dbkit.telemetry.partition_plot import _sent_units

    net = nn.build("image-local", 64, 10, image_shape=(8, 8))  # 6x6x8 -> 4x4x8 -> dense
    # by hand: layer 2's row bands {0,1} and {2,3} read rows 0-3 and 2-5 of layer 0's output,
    # whose owners are rows {0,1,2} and {3,4,5}: only rows 2 and 3 cross
    sent = _sent_units(plan(net, 2), 0)
    assert sorted(set((sent // 8) // 6)) == [2, 3]
    assert _sent_units(plan(net, 2), 2).size == 4 * 4 * 8  # the dense layer reads everything
    fig = plot_partitions(net, 2, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000 and len(fig.axes) == 3
