"""Fig. 5, simulated: the time each method takes to a fixed test accuracy against the machines it uses.

Each point is one Fig. 4-style run (``fig4.run_method``) with numerics, from the same warm start, stopped at
the target; its machines are its replicas, its shards and (Sandblaster) the coordinator's. Beyond what numerics
can run here, to the paper's scale of about 2,000 machines, each method's time is estimated from cost-only runs
(``beyond``), and the report and the figure say so.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from . import paper
from .beyond import BEYOND, SMALL_BEYOND, estimate
from .fig4 import METHODS, Method, Setup, dataset, run_method, warm_start

SWEEP = {"SGD": (1,), "Downpour 20": (5, 20, 50), "Downpour Adagrad 20": (5, 20, 50, 100, 200),
         "Sandblaster 2000": (100, 500, 2000)}
SMALL_SWEEP = {"SGD": (1,), "Downpour 20": (2, 5), "Downpour Adagrad 20": (2, 5, 20), "Sandblaster 2000": (5, 20)}
NAMES = {"SGD": "SGD", "Downpour 20": "Downpour", "Downpour Adagrad 20": "Downpour Adagrad",
         "Sandblaster 2000": "Sandblaster L-BFGS"}


def figure5(setup: Setup | None = None, sweep: dict[str, tuple[int, ...]] | None = None,
            progress: Callable[[str], None] | None = None, beyond: dict[str, tuple[int, ...]] | None = None) -> dict:
    """The Fig. 5 report: per method, machines used and simulated seconds to ``setup.target`` (``None``
    where the budget ran out first).

    Parameters
    ----------
    setup
        Shared settings (default ``Setup()``; ``Setup.small()`` with ``SMALL_SWEEP`` for a quick run).
    sweep
        Per Fig. 4 method name, the replica counts to run (default ``SWEEP``).
    progress
        Called with a line as each run ends, and every few seconds while one runs.
    beyond
        Per Fig. 4 method name, the replica counts whose time is estimated from cost-only runs (``beyond.py``);
        default: ``BEYOND`` with the default sweep, ``SMALL_BEYOND`` with ``SMALL_SWEEP``, none with another.
    """
    setup = setup or Setup()
    further: dict[str, tuple[int, ...]] = (beyond if beyond is not None else BEYOND if sweep is None
                                          else SMALL_BEYOND if sweep is SMALL_SWEEP else {})
    sweep = sweep or SWEEP
    say = progress or (lambda line: None)
    began = time.perf_counter()
    methods: dict[str, Method] = {m.role: m for m in METHODS}
    for key in (*sweep, *further):  # (before the warm start: a wrong name costs nothing)
        if key not in methods:
            raise ValueError(f"unknown method {key!r}; choose from {', '.join(methods)}")
        if key not in sweep:
            raise ValueError(f"{key!r} has no runs with numerics in the sweep for its estimates to rest on")
    data = dataset(setup)
    say(f"warm start: plain SGD, {setup.warm_steps} steps ...")
    initial, start, warm_accuracy = warm_start(setup, data)
    out: dict[str, dict] = {}
    estimated: dict[str, dict] = {}
    for key, counts in sweep.items():
        name = NAMES.get(key, key)
        row: dict[str, list] = {"replicas": [], "machines": [], "time_to_target": [], "steps": [], "batches": []}
        runs = []
        for r in counts:
            result = run_method(nearest(methods[key], r), setup, data, initial, start, replicas=r, say=progress)
            runs.append(result)
            row["replicas"].append(r)
            row["machines"].append(result["machines"])
            row["time_to_target"].append(result["time_to_target"])
            row["steps"].append(result["steps"])
            row["batches"].append(result["batches"])
            reached = result["time_to_target"]
            say(f"{name}, {r} replica{'s' if r != 1 else ''} on {result['machines']} machines: "
                + (f"{reached:.3f} simulated s" if reached is not None else
                   f"gave up ({result['gave_up']})" if result["gave_up"] else "budget ran out")
                + f" ({result['real_seconds']:.0f} s of computing)")
        out[name] = row
        if further.get(key):
            shards = runs[0]["machines"] - runs[0]["replicas"]
            found = estimate(methods[key], setup, data, start, runs, further[key], shards, say)
            if found is None:
                say(f"{name}: no run with numerics reached the target, so nothing to estimate beyond it from")
            else:
                estimated[name] = found
    return {"figure": "fig5", "simulated": True, "profile": setup.profile, "target": setup.target,
            "dataset": data.name, "model": setup.model, "setup": setup.__dict__,
            "warm_start": {"steps": setup.warm_steps, "seconds": start, "test_accuracy": warm_accuracy},
            "methods": out, "estimated": estimated, "paper": paper.FIG5, "differences": differences(out, estimated),
            "real_seconds": time.perf_counter() - began}


def nearest(method: Method, replicas: int) -> Method:
    """Of Fig. 4's methods of the same kind (algorithm and optimizer), the one whose replicas are nearest
    ``replicas`` (by ratio): its learning rate suits that many replicas (Adagrad: 0.04 for 20, 0.01 for 200)."""
    same = [m for m in METHODS if (m.algorithm, m.optimizer) == (method.algorithm, method.optimizer)]
    return min(same, key=lambda m: abs(math.log(replicas / m.replicas)))


def differences(methods: dict[str, dict], estimated: dict[str, dict] | None = None) -> list[str]:
    """Where the simulated figure's shape differs from the paper's findings, and why."""
    notes = []
    best = {name: min((t for t in row["time_to_target"] if t is not None), default=None)
            for name, row in methods.items()}
    reached = {k: v for k, v in best.items() if v is not None}
    if reached and min(reached, key=lambda k: reached[k]) != "Downpour Adagrad":
        notes.append(f"the fastest to the target here is {min(reached, key=lambda k: reached[k])}, not Downpour "
                     "with Adagrad: see fig4's differences (a small model's steps are short next to the shards' "
                     "service, so more replicas add staleness faster than examples)")
    why = {"Sandblaster L-BFGS": "every replica fetches the parameters and pushes its gradient in every batch, so "
                                 "the shards' requests grow with the replicas while the batch's arithmetic does not",
           "Downpour Adagrad": "more replicas add staleness faster than they add useful steps on a model this small",
           "Downpour": "at the learning rate that suits 20 replicas more stale replicas learn slower or diverge; "
                       "Adagrad's per-parameter rates are what let Downpour use more (the paper's point)"}
    for name, row in methods.items():
        times = [(k, t) for k, t in zip(row["machines"], row["time_to_target"])]
        hits = [(k, t) for k, t in times if t is not None]
        if len(times) > 1 and hits:
            k_best, t_best = min(hits, key=lambda kt: kt[1])
            if k_best != times[-1][0]:
                notes.append(f"{name} is fastest on {k_best:,} machines ({t_best:.3g} s) and slower or out of budget "
                             f"beyond, where the paper's methods kept gaining: {why.get(name, 'see fig4')}")
    estimated = estimated or {}
    most = max((k for row in methods.values() for k in row["machines"]), default=0)
    far = max((k for row in estimated.values() for k in row["machines"]), default=0)
    if far <= most:
        notes.append(f"the simulated sweep stops at {most:,} machines; whether Sandblaster overtakes Downpour near "
                     "30,000 cores, as the paper suggests, is beyond what this sweep runs")
    else:
        at_far = {name: row["time_to_target"][-1] for name, row in estimated.items()}
        notes.append(f"runs with numerics reach {most:,} machines; the points to {far:,} are estimated from cost-only "
                     "runs (" + "; ".join(f"{name}: {t:.3g} s" for name, t in at_far.items()) + "), Downpour's as a "
                     "lower bound, since more replicas are staler")
    return notes
