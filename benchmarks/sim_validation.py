"""The simulator against reality: real LocalCluster runs here and their simulated twins, side by side.

    python benchmarks/sim_validation.py [--seconds 5] [--cases digits,speech] [--repeat 2] [--json out.json]

For a grid of Downpour runs (replicas 1, 2, 3, 6; n_fetch = n_push 1, 4, 16;
the digits MLP and the speech preset), Sandblaster's time per batch with and
without a slow replica, and a partitioned step, it measures a real run on
dbkit's own 2-worker LocalCluster and simulates the same settings on the
``here`` profile (the last ``dbkit calibrate``; ``--profile`` for another).
Each row gives both and the error; over the grid: the median and worst
absolute percentage errors, Kendall's tau between the real and simulated
rankings of the configurations, and the Kolmogorov-Smirnov distance between
the real and simulated staleness histograms.

Real rates are measured over a window inside a running fit, read off the
replicas' own counters, after a warm-up; the simulated ones over the second
half of a simulated run of ``--sim-steps`` steps a replica. The real window
opens after half that many steps a replica and lasts as many more (and at
least ``--seconds``), so both measure the same stretch of a run and neither
counts the start. With ``--repeat 2`` every real row is measured twice, in two whole sweeps minutes apart,
the prediction is compared with their mean, and the summary says how far the two real runs are apart
(``real_vs_real``): the noise floor of the comparison, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np
from scipy.stats import kendalltau

from dbkit.training import ReplicaFigures
from dbkit.config import RunConfig
from dbkit.ps import Histogram

from common import write_json

CASES = {"digits": dict(dataset="digits", model="mlp", lr=0.05, batch_size=32),
         "speech": dict(dataset="speech", model="speech", lr=0.05, batch_size=32)}


def window(before: list[ReplicaFigures], after: list[ReplicaFigures], seconds: float) -> dict:
    """Examples per second and the pushes' staleness between two readings of the replicas' figures."""
    b = {f.replica: f for f in before}
    examples = sum(f.examples - (b[f.replica].examples if f.replica in b else 0) for f in after)
    zero = ReplicaFigures(-1)
    versions = Histogram.total(f.staleness - b.get(f.replica, zero).staleness for f in after)
    ages = Histogram.total(f.age - b.get(f.replica, zero).age for f in after)
    return {"examples_per_second": examples / seconds, "staleness": versions.mean(),
            "staleness_examples": ages.mean(), "histogram": dict(zip(versions.values, versions.counts))}


def real_downpour(client, case: dict, replicas: int, n: int, seconds: float, optimizer: str = "sgd",
                  steps: int = 0) -> dict:
    """A real Downpour run on ``client``'s cluster: its rates and staleness over a window of at least ``seconds``
    and ``steps`` steps a replica, after a warm-up of as many steps."""
    return real_window(client, seconds, steps=steps, model=case["model"], data=case["dataset"], replicas=replicas,
                       shards=2, n_fetch=n, n_push=n, optimizer=optimizer, lr=case["lr"],
                       batch_size=case["batch_size"])


def real_window(client, seconds: float, steps: int = 0, cap: float = 60.0, **settings) -> dict:
    """A real Downpour job of ``settings`` on ``client``'s cluster, measured once running.

    The window is the twin of the simulated one (the second half of a run of ``2 * steps`` steps a replica):
    it opens once every replica has taken ``steps`` steps (and at least 2.5 s have passed) and closes once
    every replica has taken ``steps`` more (and at least ``seconds`` have passed), each wait capped at
    ``cap`` seconds. Replicas that start together start in phase, and their first pushes see fewer versions
    than they do once their phases have spread (speech, six replicas, n = 16: 2.6 over a window of 4 s
    opened at 2.5 s, 4.2 over one of 16 s); a window of a few pushes a replica measures the start, not the
    run. ``seconds`` alone (``steps=0``) keeps the fixed window of the earlier passes."""
    from dbkit import DownpourSGD

    def least_steps() -> int:
        figures = job.replicas()
        return min((f.steps for f in figures), default=0) if len(figures) == settings["replicas"] else 0

    def wait_for(target: int, at_least: float, began: float) -> None:
        while time.perf_counter() - began < cap and (time.perf_counter() - began < at_least
                                                      or least_steps() < target):
            time.sleep(0.05)

    with DownpourSGD(client=client, eval_every=10**9, **settings) as job:
        job.fit(seconds=min(2.0, seconds), progress=False)  # replicas started, first fetches done
        runner = threading.Thread(target=job.fit, kwargs={"seconds": 2 * cap + seconds + 60, "progress": False})
        runner.start()
        wait_for(steps, 0.5, time.perf_counter())
        before, t0 = job.replicas(), time.perf_counter()
        wait_for(least_steps() + steps, seconds, t0)
        after, dt = job.replicas(), time.perf_counter() - t0
        job.pause()
        runner.join()
    return window(before, after, dt)


def simulated_downpour(case: dict, replicas: int, n: int, steps_per_replica: int, profile: str,
                       optimizer: str = "sgd") -> dict:
    """The same settings simulated: rates and staleness over the run's second half."""
    from dbkit.sim import Cluster, simulated_run
    from dbkit.telemetry import Sample

    steps = steps_per_replica * replicas
    cfg = RunConfig.make(algorithm="downpour", model=case["model"], dataset=case["dataset"], replicas=replicas,
                         shards=2, n_fetch=n, n_push=n, optimizer=optimizer, lr=case["lr"],
                         batch_size=case["batch_size"], steps=steps, eval_every=steps // 2)
    run = simulated_run(cfg, Cluster(profile))
    run.run()
    samples = run.events.of(Sample)
    mid, end = samples[1], samples[-1]
    return window(list(mid.replicas), list(end.replicas), end.t - mid.t)


def real_sandblaster(client, replicas: int, slow: float, iterations: int) -> dict:
    """A real Sandblaster run of the linear model on the digits: its median seconds per batch gradient."""
    from dbkit import SandblasterLBFGS

    slow_replicas = ((0, slow),) if slow > 1 else ()
    with SandblasterLBFGS("linear", "digits", replicas=replicas, shards=2, iterations=iterations, l2=1e-3,
                          slow_replicas=slow_replicas, client=client, eval_every=10**6) as job:
        job.fit(progress=False)
        report = job.report()
    return {"batch_seconds": report["sandblaster"]["batch_seconds_median"]}


def simulated_sandblaster(replicas: int, slow: float, iterations: int, profile: str) -> dict:
    from dbkit.sim import Cluster, simulate

    cfg = RunConfig.make(algorithm="sandblaster", model="linear", dataset="digits", replicas=replicas, shards=2,
                         iterations=iterations, l2=1e-3, slow_replicas=((0, slow),) if slow > 1 else (),
                         steps=iterations, eval_every=10**6)
    return {"batch_seconds": simulate(cfg, Cluster(profile))["sandblaster"]["batch_seconds_median"]}


def real_partitioned(client, partitions: int, seconds: float) -> dict:
    """A real partitioned replica of the digits MLP: examples per second over a window."""
    measured = real_window(client, seconds, model="mlp", data="digits", replicas=1, shards=partitions,
                           partitions=partitions, optimizer="sgd", lr=0.05)
    return {"examples_per_second": measured["examples_per_second"]}


def simulated_partitioned(partitions: int, steps: int, profile: str) -> dict:
    from dbkit.sim import Cluster, simulate

    cfg = RunConfig.make(algorithm="downpour", model="mlp", dataset="digits", replicas=1, shards=partitions,
                         partitions=partitions, optimizer="sgd", lr=0.05, steps=steps, eval_every=10**6)
    report = simulate(cfg, Cluster(profile))
    return {"examples_per_second": report["examples_per_second"]}


def ks_distance(a: dict, b: dict) -> float:
    """Kolmogorov-Smirnov distance between two histograms ``{value: count}``."""
    values = sorted(set(a) | set(b))
    ca = np.cumsum([a.get(v, 0) for v in values]) / max(1, sum(a.values()))
    cb = np.cumsum([b.get(v, 0) for v in values]) / max(1, sum(b.values()))
    return float(np.max(np.abs(ca - cb))) if values else 0.0


def error(real: float, simulated: float, floor: float = 0.0) -> float:
    """The simulated value's error relative to the real one (or to ``floor`` when the real one is smaller:
    staleness is compared in versions against at least one version, as a replica alone has almost none)."""
    scale = max(abs(real), floor)
    return (simulated - real) / scale if scale else float("nan")


def errors(real: dict, other: dict) -> dict[str, float]:
    """``other``'s errors against ``real``: examples per second, and staleness in versions (against at least
    one) and in examples (against at least one batch)."""
    return {"examples_per_second": error(real["examples_per_second"], other["examples_per_second"]),
            "staleness": error(real["staleness"], other["staleness"], floor=1.0),
            "staleness_examples": error(real["staleness_examples"], other["staleness_examples"], floor=32.0)}


def mean_of(runs: list[dict]) -> dict:
    """Several real measurements of one setting as one: the mean of each figure, the histograms summed."""
    if len(runs) == 1:
        return runs[0]
    histogram: dict = {}
    for run in runs:
        for value, count in run["histogram"].items():
            histogram[value] = histogram.get(value, 0) + count
    return {key: statistics.fmean(run[key] for run in runs)
            for key in ("examples_per_second", "staleness", "staleness_examples")} | {"histogram": histogram}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0,
                   help="shortest measuring window of each real run (it also lasts the simulated window's steps)")
    p.add_argument("--cases", default="digits,speech")
    p.add_argument("--replicas", default="1,2,3,6")
    p.add_argument("--n", default="1,4,16", help="values of n_fetch = n_push")
    p.add_argument("--profile", default="here")
    p.add_argument("--sim-steps", type=int, default=400, help="simulated steps per replica (default: %(default)s)")
    p.add_argument("--sandblaster", default="1,4", help="slow replica factors of the Sandblaster rows ('' for none)")
    p.add_argument("--partitions", default="2", help="partitions of the partitioned-step rows ('' for none)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measure every real Downpour row this many times, in whole sweeps, and compare with their "
                        "mean; with 2 or more, each row also gives how far its first two real runs are apart "
                        "(the noise floor a prediction is judged against) (default: %(default)s)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    from threadpoolctl import threadpool_limits

    from dbkit.runtime.dask import Cluster

    rows = []
    grid = [(name, r, n) for name in args.cases.split(",") for r in map(int, args.replicas.split(","))
            for n in map(int, args.n.split(","))]
    with Cluster(n_workers=2) as cluster:
        measured: dict[tuple, list[dict]] = {g: [] for g in grid}
        for rep in range(args.repeat):  # whole sweeps, so that a repeat is minutes after the first measurement
            for name, r, n in grid:
                real = real_downpour(cluster.client, CASES[name], r, n, args.seconds, steps=args.sim_steps // 2)
                measured[(name, r, n)].append(real)
                print(f"{name:>7} R={r} n={n:<3} real (sweep {rep + 1}) {real['examples_per_second']:9.0f} ex/s "
                      f"stale {real['staleness']:6.2f}", flush=True)
        for name, r, n in grid:
            runs = measured[(name, r, n)]
            real = mean_of(runs)
            with threadpool_limits(1):
                sim = simulated_downpour(CASES[name], r, n, args.sim_steps, args.profile)
            row = {"config": {"case": name, "replicas": r, "n": n}, "real": real, "simulated": sim,
                   "error": errors(real, sim), "ks": ks_distance(real["histogram"], sim["histogram"])}
            if len(runs) > 1:  # how far two real runs of the same settings are apart: the noise floor
                row["real_runs"] = runs
                row["real_spread"] = errors(runs[0], runs[1])
            rows.append(row)
            print(f"{name:>7} R={r} n={n:<3} real {real['examples_per_second']:9.0f} ex/s stale "
                  f"{real['staleness']:6.2f} | sim {sim['examples_per_second']:9.0f} ex/s stale "
                  f"{sim['staleness']:6.2f} | err {row['error']['examples_per_second']:+6.1%} "
                  f"{row['error']['staleness']:+6.1%} ks {row['ks']:.2f}", flush=True)
        others = []
        for slow in [float(x) for x in args.sandblaster.split(",") if x]:
            real = real_sandblaster(cluster.client, 3, slow, 8)
            with threadpool_limits(1):
                sim = simulated_sandblaster(3, slow, 8, args.profile)
            others.append({"config": {"case": "sandblaster", "replicas": 3, "slow": slow}, "real": real,
                           "simulated": sim, "error": {"batch_seconds": error(real["batch_seconds"],
                                                                              sim["batch_seconds"])}})
        for k in [int(x) for x in args.partitions.split(",") if x]:
            real = real_partitioned(cluster.client, k, args.seconds)
            with threadpool_limits(1):
                sim = simulated_partitioned(k, args.sim_steps, args.profile)
            others.append({"config": {"case": "partitioned", "partitions": k}, "real": real, "simulated": sim,
                           "error": {"examples_per_second": error(real["examples_per_second"],
                                                                  sim["examples_per_second"])}})
        for row in others:
            (key, err), = row["error"].items()
            print(f"{row['config']}: real {row['real'][key]:.4g} sim {row['simulated'][key]:.4g} ({key}) "
                  f"err {err:+6.1%}", flush=True)
    summary = summarize(rows)
    print(summary)
    write_json(args.json, "sim_validation", {"profile": args.profile, "rows": rows, "other_rows": others,
                                             "summary": summary})
    return 0


def summarize(rows: list[dict]) -> dict:
    out = {}
    for key in ("examples_per_second", "staleness", "staleness_examples"):
        errs = [abs(r["error"][key]) for r in rows if np.isfinite(r["error"][key])]
        tau = kendalltau([r["real"][key] for r in rows], [r["simulated"][key] for r in rows]).statistic
        tau = float(tau) if np.isfinite(tau) else None
        out[key] = {"median_abs_error": statistics.median(errs) if errs else None,
                    "worst_abs_error": max(errs) if errs else None, "kendall_tau": tau}
    out["ks_median"] = statistics.median(r["ks"] for r in rows)
    spread = [r["real_spread"] for r in rows if "real_spread" in r]
    if spread:  # the same figures for the first two real runs of each setting against each other
        out["real_vs_real"] = {key: {"median_abs_error": statistics.median(abs(s[key]) for s in spread),
                                     "worst_abs_error": max(abs(s[key]) for s in spread)}
                               for key in ("examples_per_second", "staleness", "staleness_examples")}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
