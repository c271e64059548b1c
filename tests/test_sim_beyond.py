"""Fig. 5 beyond the runs with numerics: the estimates from cost-only runs rest on two facts, each checked here
against a run with numerics (a cost-only run takes the simulated time numerics take for the same steps;
Sandblaster's L-BFGS takes the same batches and iterates on any number of replicas), and the report and the
figure label every estimated point."""

import numpy as np
import pytest

from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run
from dbkit.sim.figures import figure5, plot_figure
from dbkit.sim.figures.beyond import steps_seconds
from dbkit.sim.figures.fig4 import METHODS, Setup, dataset, method_config
from dbkit.telemetry.events import BatchDone

SETUP = Setup(train_examples=3_000, shards=2, sandblaster_shards=2, seconds=2.0, warm_steps=30, target=0.3)
ADAGRAD = next(m for m in METHODS if m.role == "Downpour Adagrad 20")


def test_a_cost_only_run_takes_the_simulated_time_numerics_take_for_the_same_steps():
    data = dataset(SETUP)
    steps, replicas = 600, 6
    seconds = steps_seconds(ADAGRAD, SETUP, data, replicas, steps)
    cfg = method_config(ADAGRAD, SETUP, replicas).replace(steps=2 * steps, seconds=None, eval_every=steps // 40)
    run = simulated_run(cfg, Cluster(SETUP.profile), data=data)
    run.run()
    rows = [(float(h["t"]), int(h["step"])) for h in run.history]
    t0, s0 = max((r for r in rows if r[1] <= steps), key=lambda r: r[1])
    t1, s1 = min((r for r in rows if r[1] >= steps), key=lambda r: r[1])
    with_numerics = t0 + (t1 - t0) * (steps - s0) / max(1, s1 - s0)
    assert seconds > 0 and seconds == pytest.approx(with_numerics, rel=0.02)


def test_sandblaster_takes_the_same_batches_and_iterates_on_any_number_of_replicas():
    data = dataset(SETUP)
    outcome = {}
    for replicas in (2, 7):
        cfg = RunConfig.make(algorithm="sandblaster", dataset="signals", model="mlp", replicas=replicas, shards=2,
                             steps=4, eval_every=10**6, work_unit_size=100, seed=0)
        run = simulated_run(cfg, Cluster(SETUP.profile), data=data)
        run.run()
        outcome[replicas] = (len(run.events.of(BatchDone)), run.parameters())
    assert outcome[2][0] == outcome[7][0] > 4
    np.testing.assert_allclose(outcome[2][1], outcome[7][1], rtol=1e-4, atol=1e-6)  # (float32 sums in another order)


def test_fig5_labels_the_points_estimated_beyond_its_runs_with_numerics(tmp_path):
    lines: list[str] = []
    r = figure5(SETUP, {"Downpour Adagrad 20": (2, 3), "Sandblaster 2000": (2,)}, progress=lines.append,
                beyond={"Downpour Adagrad 20": (12,), "Sandblaster 2000": (6,)})
    for name, shards in (("Downpour Adagrad", 2), ("Sandblaster L-BFGS", 3)):
        row, far = r["methods"][name], r["estimated"][name]
        reached = [(n, t) for n, t in zip(row["replicas"], row["time_to_target"]) if t is not None]
        assert reached, f"{name} did not reach {SETUP.target} with numerics: the setup is too hard for this test"
        assert far["cost_only"] and far["basis"]["replicas"] == max(n for n, _ in reached)
        assert far["machines"] == [n + shards for n in far["replicas"]]
        assert all(t > r["warm_start"]["seconds"] for t in far["time_to_target"])
    assert "lower bound" in r["estimated"]["Downpour Adagrad"]["how"]
    check = r["estimated"]["Sandblaster L-BFGS"]["check"]
    assert check["estimated"] == pytest.approx(check["ran"], rel=0.3)  # the cost model alone, beside the run
    assert any("estimated from cost-only runs" in note for note in r["differences"])
    assert any("estimated, cost-only" in line for line in lines)
    assert plot_figure(r, tmp_path / "fig5.png").stat().st_size > 0


def test_nothing_is_estimated_from_runs_that_never_reached_the_target():
    lines: list[str] = []
    r = figure5(Setup(train_examples=3_000, shards=2, seconds=0.02, warm_steps=30, target=0.99),
                {"Downpour Adagrad 20": (2,)}, progress=lines.append, beyond={"Downpour Adagrad 20": (12,)})
    assert r["estimated"] == {} and any("nothing to estimate" in line for line in lines)
    with pytest.raises(ValueError, match="unknown method"):
        figure5(SETUP, {"SGD": (1,)}, beyond={"Hogwild": (4,)})
    with pytest.raises(ValueError, match="no runs with numerics"):
        figure5(SETUP, {"SGD": (1,)}, beyond={"Downpour Adagrad 20": (4,)})
