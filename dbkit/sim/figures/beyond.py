"""Fig. 5 beyond the machines a run with numerics can reach: a method's time to the target estimated from
cost-only runs (DistBelief Sec. 5 and Fig. 5; the paper's scale is about 2,000 machines, 32,000 cores).

A run with numerics of 2,000 Downpour replicas does not fit a laptop's time, but its speed does: a cost-only run
(``dbkit.sim.simulated_run(..., cost_only=True)``) charges every computation, message and shard service of the
same settings (``tests/test_sim_beyond.py`` checks that it takes the simulated time numerics take). The estimate
on ``N`` replicas rests on the method's largest run with numerics that reached the target:

- **Downpour**: the simulated seconds ``N`` replicas take, from the warm start, to do the steps that run took.
  More replicas are staler, and staler steps learn less, so the estimate is a **lower bound** on the time.
- **Sandblaster**: the batches that run took, at the simulated seconds per batch of ``N`` replicas. A batch's
  gradient is the sum over the whole training set whichever replicas compute its work units, so L-BFGS takes
  the same iterates and batches on any number of replicas: the estimate rests only on the cost model. Its
  ``check`` makes the same estimate for the replicas of the run with numerics, beside that run's own time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...data import Dataset
from ...runtime.sim.layout import Cluster
from ...telemetry.events import BatchDone
from ..api import simulated_run
from .fig4 import Method, Setup, method_config

#: per Fig. 4 method, the replicas estimated beyond ``fig5.SWEEP`` (machines: these plus the shards)
BEYOND: dict[str, tuple[int, ...]] = {"Downpour 20": (2000,), "Downpour Adagrad 20": (2000,)}
#: with ``fig5.SMALL_SWEEP``: a tenth of the scale, and Sandblaster's too (its small sweep stops at 20 replicas)
SMALL_BEYOND: dict[str, tuple[int, ...]] = {"Downpour 20": (200,), "Downpour Adagrad 20": (200,),
                                            "Sandblaster 2000": (200,)}

LOWER_BOUND = ("a lower bound: the simulated seconds this many replicas take (cost-only) to do the steps the largest "
               "run with numerics took to the target (more replicas are staler and may need more steps)")
SAME_BATCHES = ("the batches the largest run with numerics took to the target (L-BFGS takes the same batches "
                "on any number of replicas), at the cost-only seconds per batch of this many replicas")


def steps_seconds(method: Method, setup: Setup, data: Dataset, replicas: int, steps: int) -> float:
    """Simulated seconds ``replicas`` Downpour replicas take to do ``steps`` steps (all of them still running:
    the cost-only run goes on past them, and its step count is read between two evaluations)."""
    every = max(1, steps // 40)
    cfg = method_config(method, setup, replicas)
    run = simulated_run(cfg.replace(steps=steps + steps // 10 + every, seconds=None, eval_every=every),
                        Cluster(setup.profile), data=data, cost_only=True)
    run.run()
    rows = [(float(h["t"]), int(h["step"])) for h in run.history]
    for (t0, s0), (t1, s1) in zip(rows, rows[1:]):
        if s0 <= steps <= s1 and s1 > s0:
            return t0 + (t1 - t0) * (steps - s0) / (s1 - s0)
    raise RuntimeError(f"a cost-only run of {replicas} replicas did not pass {steps:,} steps")


def seconds_per_batch(method: Method, setup: Setup, data: Dataset, replicas: int) -> float:
    """Simulated seconds a Sandblaster batch takes on ``replicas`` replicas, from a cost-only run of two iterations
    (the coordinator's L-BFGS commands between batches included)."""
    cfg = method_config(method, setup, replicas)
    run = simulated_run(cfg.replace(steps=2, seconds=None), Cluster(setup.profile), data=data, cost_only=True)
    run.run()
    batches = len(run.events.of(BatchDone))
    if batches == 0 or run.virtual_seconds <= 0:
        raise RuntimeError(f"a cost-only Sandblaster run of {replicas} replicas finished no batch")
    return run.virtual_seconds / batches


def estimate(method: Method, setup: Setup, data: Dataset, start: float, runs: list[dict], counts: tuple[int, ...],
             others: int, say: Callable[[str], None] = lambda line: None) -> dict | None:
    """The estimated times to the target of ``method`` on ``counts`` replicas, from its ``runs`` with numerics
    (``fig4.run_method``'s results); ``others``: the machines besides the replicas (shards, coordinator);
    ``None`` if none of the runs reached the target."""
    reached = [r for r in runs if r["time_to_target"] is not None]
    if not reached or not counts:
        return None
    basis = max(reached, key=lambda r: r["replicas"])
    sandblaster = method.algorithm == "sandblaster"
    work = basis["batches"] if sandblaster else basis["steps"]
    unit = "batches" if sandblaster else "steps"
    row: dict = {"replicas": [], "machines": [], "time_to_target": [], "real_seconds": [],
                 "how": SAME_BATCHES if sandblaster else LOWER_BOUND, "cost_only": True,
                 "basis": {"replicas": basis["replicas"], unit: work, "time_to_target": basis["time_to_target"]}}
    if sandblaster:
        estimated = start + work * seconds_per_batch(method, setup, data, basis["replicas"])
        row["check"] = {"replicas": basis["replicas"], "estimated": estimated, "ran": basis["time_to_target"]}
    for n in counts:
        say(f"{method.name(n)}: estimating from a cost-only run of {n:,} replicas ...")
        began = time.perf_counter()
        seconds = (work * seconds_per_batch(method, setup, data, n) if sandblaster
                   else steps_seconds(method, setup, data, n, work))
        row["replicas"].append(n)
        row["machines"].append(n + others)
        row["time_to_target"].append(start + seconds)
        row["real_seconds"].append(time.perf_counter() - began)
        say(f"{method.name(n)} on {n + others:,} machines: about {start + seconds:.3f} simulated s "
            f"(estimated, cost-only; {row['real_seconds'][-1]:.0f} s of computing)")
    return row
