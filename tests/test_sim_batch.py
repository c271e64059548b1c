"""A replica's batch is the one asked, or the report and summary say it is not; examples per second counts
the examples computed (cost-only runs give every replica a full batch of their stand-in)."""

import pytest

from dbkit.cli.summary import print_summary
from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run


def test_a_cost_only_run_of_many_replicas_computes_the_batch_asked():
    # the stand-in holds 1,437 training examples: 100 replicas of 32 need more, so it is repeated
    cfg = RunConfig.make(algorithm="downpour", replicas=100, shards=4, steps=300, batch_size=32, eval_every=300)
    r = simulated_run(cfg, Cluster("distbelief-2012"), shape="speech-42m", cost_only=True).run()
    assert r["batch"] == {"asked": 32, "smallest": 32, "largest": 32, "shrunk": False,
                          "examples_per_replica": pytest.approx(r["batch"]["examples_per_replica"])}
    assert r["examples"] == r["steps"] * 32 == sum(x["examples"] for x in r["replicas"])
    assert r["examples_per_second"] == pytest.approx(r["examples"] / r["wall_seconds"])


def test_replicas_whose_data_shard_is_smaller_than_the_batch_say_so():
    # digits' 1,437 training examples over 200 replicas: 7 or 8 each, so a step computes 7 or 8, not 32
    cfg = RunConfig.make(algorithm="downpour", model="linear", replicas=200, shards=2, steps=400, batch_size=32,
                         eval_every=400)
    r = simulated_run(cfg, Cluster("distbelief-2012")).run()
    assert r["batch"]["shrunk"] is True and (r["batch"]["smallest"], r["batch"]["largest"]) == (7, 8)
    per_step = {x["examples"] / x["steps"] for x in r["replicas"] if x["steps"]}
    assert per_step <= {7.0, 8.0}  # what each replica computed
    assert r["examples"] == sum(x["examples"] for x in r["replicas"]) < 400 * 32
    assert r["examples_per_second"] == pytest.approx(r["examples"] / r["wall_seconds"])
    lines: list[str] = []
    print_summary(r, lines.append)
    assert any(line.startswith("batch: 7-8 examples a step, not the 32 asked") for line in lines)


def test_a_batch_that_fits_is_not_called_shrunk():
    cfg = RunConfig.make(algorithm="downpour", model="linear", replicas=4, shards=2, steps=40, eval_every=40)
    r = simulated_run(cfg, Cluster("distbelief-2012")).run()
    assert r["batch"]["shrunk"] is False and r["examples"] == 40 * 32
    lines: list[str] = []
    print_summary(r, lines.append)
    assert not any(line.startswith("batch:") for line in lines)


def test_a_report_of_200_replicas_summarises_its_samples_and_keeps_every_row_when_asked(tmp_path):
    import json

    from dbkit.telemetry import validate_report, write_report

    cfg = RunConfig.make(algorithm="downpour", model="linear", replicas=200, shards=2, steps=600, eval_every=200)
    run = simulated_run(cfg, Cluster("distbelief-2012"))
    short = run.run()
    samples = [e for e in short["events"] if e["type"] == "Sample"]
    assert validate_report(short) == [] and short["replica_rows"] == "summarised" and len(short["replicas"]) == 200
    assert samples and all(e["replicas"] == [] and e["live_replicas"] >= 0 for e in samples)
    assert sum(r["steps"] for r in short["replicas"]) == short["steps"]  # the final table stays whole
    run.full_report = True
    full = run.report()
    rows = [e for e in full["events"] if e["type"] == "Sample"]
    assert full["replica_rows"] == "full" and validate_report(full) == []
    assert max(len(e["replicas"]) for e in rows) == 200
    small = write_report(short, tmp_path / "s.json").stat().st_size
    big = write_report(full, tmp_path / "f.json").stat().st_size
    assert small < big / 2
    assert json.loads((tmp_path / "s.json").read_text())["replica_rows"] == "summarised"


def test_a_cost_only_sandblaster_batch_is_the_costed_data_s_whole_training_set():
    # The stand-in (digits, 1,437 examples) is repeated and cut to signals' training set: the first batch has the
    # same work units, and takes the same simulated time, as the run with numerics.
    from dbkit.data import load
    from dbkit.telemetry.events import BatchDone

    units = -(-load("signals").n_train // 100)
    assert units > 1437 // 100 + 1  # more than the stand-in's own

    cfg = RunConfig.make(algorithm="sandblaster", model="mlp", dataset="signals", replicas=6, shards=2, steps=1,
                         eval_every=10**6, work_unit_size=100)
    first = {}
    for cost_only in (False, True):
        run = simulated_run(cfg, Cluster("distbelief-2012"), cost_only=cost_only)
        run.run()
        batch = next(e for e in run.events.since(-1) if isinstance(e, BatchDone))
        first[cost_only] = ({u.unit for u in batch.units if u.unit >= 0}, batch.seconds)  # (-1: a flush)
    assert first[True][0] == first[False][0] == set(range(units))
    assert first[True][1] == pytest.approx(first[False][1], rel=1e-9)
