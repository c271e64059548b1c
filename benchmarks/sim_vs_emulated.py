"""The simulator checked against the emulated cluster (issue #47), each setting run twice for real on
``dbkit.emulate.Cluster`` and once in the simulator on the emulated cluster's profile (``dbkit.emulate.profile``:
``here`` with the links' rate and its arithmetic rescaled to a gradient measured on a host), side by side, in one
run. Three parts (``--parts``):

- ``downpour``: Downpour on the speech preset, shards on hosts 1..S and replicas on the next R hosts; examples
  per second and mean staleness of each, the simulator's error against the first real run beside the second
  real run's difference from the first (the emulation's own repeatability), and Kendall's tau of the settings'
  order by examples per second.
- ``sandblaster``: Sandblaster L-BFGS on the speech preset, 2 shards and 4 replicas on hosts of their own, as
  built and with replica 0's host slowed (its CPU share divided by ``--slow``; the simulator's
  ``slow_replicas`` by the same factor): the median batch time and the slowed replica's share of the units.
- ``partitioned``: one replica of a dense and of a locally connected model split over K = 1, 2, 4, 8 hosts
  (``fig3_emulated.measure_link``), measured speed-up beside the simulator's.

    python benchmarks/sim_vs_emulated.py [--parts downpour,sandblaster,partitioned] [--replicas 1,2,4]
        [--shards 1,2,4] [--n 1,16] [--seconds 12] [--hosts 8] [--link 100mbit] [--cpu 0.25] [--slow 4]
        [--iterations 4] [--json F]

Needs root; elsewhere it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from dataclasses import asdict, dataclass

from common import write_json


@dataclass
class Measured:
    examples_per_second: float
    staleness: float
    steps: int


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def measured(report: dict) -> Measured:
    """Examples per second and the mean staleness over every shard's accepted pushes."""
    counts = [s["staleness"]["count"] for s in report["shards"]]
    means = [s["staleness"]["mean"] for s in report["shards"]]
    stale = sum(c * m for c, m in zip(counts, means)) / max(1, sum(counts))
    return Measured(float(report["examples_per_second"]), float(stale), int(report["steps"]))


def settings(replicas: int, shards: int, n: int) -> dict:
    return {"replicas": replicas, "shards": shards, "n_fetch": n, "n_push": n, "optimizer": "adagrad", "lr": 0.01,
            "batch_size": 32, "seed": 0}


def real_run(client, data, workers: list[str], replicas: int, shards: int, n: int, seconds: float) -> Measured:
    import dbkit

    with dbkit.DownpourSGD("speech", data, client=client, shard_workers=workers[:shards],
                           replica_workers=workers[shards:shards + replicas], **settings(replicas, shards, n)) as job:
        job.fit(seconds=seconds, progress=False)
        return measured(job.report())


def simulated_run(profile, data, replicas: int, shards: int, n: int, seconds: float) -> Measured:
    import dbkit
    from dbkit.sim import Cluster as SimCluster

    machines = SimCluster(profile.but(machine={"machines": 0}))  # each replica and shard on a machine of its own
    with dbkit.DownpourSGD("speech", data, cluster=machines, **settings(replicas, shards, n)) as job:
        job.fit(seconds=seconds, progress=False)
        return measured(job.report())


@dataclass
class Batches:
    """A Sandblaster run: its median batch time and the slowed replica's (replica 0's) share of the units."""

    batch_seconds: float
    slowed_share: float
    iterations: int


def batches(report: dict) -> Batches:
    sb = report["sandblaster"]
    units = {int(k): v for k, v in sb["units_per_replica"].items()}
    return Batches(float(sb["batch_seconds_median"]), units.get(0, 0) / max(1, sum(units.values())),
                   int(sb["iterations"]))


def sandblaster_part(emulated, client, data, profile, cpu: float, slow: float, iterations: int) -> list[dict]:
    """Sandblaster with 2 shards (hosts 1, 2) and 4 replicas (hosts 3-6), as built and with host 3 (replica 0)
    at ``cpu / slow`` of a core; real twice, simulated once with replica 0 ``slow`` times slower."""
    import dbkit
    from dbkit.sim import Cluster as SimCluster

    workers = emulated.workers()
    settings = {"replicas": 4, "shards": 2, "iterations": iterations, "seed": 0}
    rows = []
    for slowed in (False, True):
        emulated.set_cpu(3, cpu / slow if slowed else cpu)
        try:
            real = []
            for _ in range(2):
                with dbkit.SandblasterLBFGS("speech", data, client=client, shard_workers=workers[:2],
                                            replica_workers=workers[2:6], **settings) as job:
                    job.fit(progress=False)
                    real.append(batches(job.report()))
        finally:
            emulated.set_cpu(3, cpu)
        machines = SimCluster(profile.but(machine={"machines": 0}))
        with dbkit.SandblasterLBFGS("speech", data, cluster=machines, **settings,
                                    **({"slow_replicas": {0: slow}} if slowed else {})) as job:
            job.fit(progress=False)
            sim = batches(job.report())
        rows.append({"slowed": slow if slowed else 1.0, "real": asdict(real[0]), "again": asdict(real[1]),
                     "simulated": asdict(sim)})
        print(f"Sandblaster, replica 0's host {'slowed ' + format(slow, 'g') + 'x' if slowed else 'as built'}: "
              f"median batch real {real[0].batch_seconds:.2f} s, again {real[1].batch_seconds:.2f} s, simulated "
              f"{sim.batch_seconds:.2f} s; replica 0's share of the units real {real[0].slowed_share:.1%}, again "
              f"{real[1].slowed_share:.1%}, simulated {sim.slowed_share:.1%}", flush=True)
    return rows


def partitioned_part(args) -> dict:  # noqa: ANN001 - argparse's namespace
    """Fig. 3's two models split over K hosts on a cluster of their own (``fig3_emulated.measure_link``)."""
    from fig3_emulated import measure_link

    run = measure_link(args.hosts, args.link, args.cpu, [k for k in (1, 2, 4, 8) if k <= args.hosts], 10, 32)
    for name, m in run["models"].items():
        for r in m["rows"]:
            print(f"partitioned {name} K={r['k']}: measured {r['speedup']:.2f}x, simulated "
                  f"{r['simulated_speedup']:.2f}x", flush=True)
    return run


def fitted(profile, data, seconds: float, real_eps: float, replicas: int = 1, shards: int = 1, n: int = 16,
           rounds: int = 8):  # noqa: ANN001, ANN201 - a simulator profile
    """``profile`` with its ``cpu_factor`` fitted (bisection) so that the simulator gives ``real_eps`` examples/s
    for one setting (default R = 1, S = 1, n = 16: nearly all arithmetic), as ``here``'s own worker factor was
    fitted to one real replica: "the rest calibrated on it". The other settings then test the fit."""
    base = profile.machine.cpu_factor
    lo, hi = 0.4, 1.6  # the factor's multiplier; the simulator's examples/s falls as it grows
    for _ in range(rounds):
        mid = (lo + hi) / 2
        eps = simulated_run(profile.but(machine={"cpu_factor": base * mid}), data, replicas, shards, n,
                            seconds).examples_per_second
        lo, hi = (mid, hi) if eps > real_eps else (lo, mid)
    return profile.but(machine={"cpu_factor": base * (lo + hi) / 2})


def kendall(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic) if len(a) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default="1,2,4", help="the first of replicas, shards and n is the setting the "
                    "fitted profile's cpu_factor is fitted on")
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--n", default="16,1")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--link", default="100mbit")
    ap.add_argument("--cpu", type=float, default=0.25)
    ap.add_argument("--parts", default="downpour,sandblaster,partitioned")
    ap.add_argument("--slow", type=float, default=4.0, help="the Sandblaster straggler's slowdown (default 4)")
    ap.add_argument("--iterations", type=int, default=4, help="Sandblaster's L-BFGS iterations per run")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - {"downpour", "sandblaster", "partitioned"}
    if unknown or not parts:
        print(f"sim_vs_emulated: --parts takes downpour, sandblaster, partitioned; got {args.parts!r}",
              file=sys.stderr)
        return 2
    if "sandblaster" in parts and args.hosts < 6:
        print("sim_vs_emulated: the sandblaster part needs --hosts 6 or more (2 shards, 4 replicas)", file=sys.stderr)
        return 2
    from distributed import Client

    import dbkit
    from dbkit.emulate import Cluster, missing
    from dbkit.emulate.profile import emulated_profile, gradient_seconds

    why = missing()
    if why:
        print(f"sim_vs_emulated: {why}", file=sys.stderr)
        return 2
    grid = [(r, s, n) for r, s, n in itertools.product(_ints(args.replicas), _ints(args.shards), _ints(args.n))
            if r + s <= args.hosts] if "downpour" in parts else []
    data = dbkit.load_dataset("speech")
    rows = []
    began = time.perf_counter()
    with Cluster(hosts=args.hosts, link=args.link, cpu=args.cpu) as emulated, Client(emulated.address) as client:
        free, capped = gradient_seconds(None), gradient_seconds(1)
        profile = emulated_profile(emulated.spec, capped)
        print(f"{profile.name}: a speech gradient takes {capped * 1e3:.1f} ms on a host, {free * 1e3:.1f} ms with no "
              f"quota; cpu_factor {profile.machine.cpu_factor:.2f}", flush=True)
        workers = emulated.workers()  # in host order: shards on hosts 1..S, replicas after them
        fit = None
        for r, s, n in grid:
            first = real_run(client, data, workers, r, s, n, args.seconds)
            second = real_run(client, data, workers, r, s, n, args.seconds)
            if fit is None:  # the first setting calibrates the factor (R=1 S=1 n=16 by default: put it first)
                fit = fitted(profile, data, args.seconds, first.examples_per_second, r, s, n)
                print(f"cpu_factor fitted on R={r} S={s} n={n}: {fit.machine.cpu_factor:.2f} (measured probe: "
                      f"{profile.machine.cpu_factor:.2f})", flush=True)
            sim = simulated_run(profile, data, r, s, n, args.seconds)
            sim_fit = simulated_run(fit, data, r, s, n, args.seconds)
            rows.append({"replicas": r, "shards": s, "n": n, "real": asdict(first), "again": asdict(second),
                         "simulated": asdict(sim), "fitted": asdict(sim_fit)})
            print(f"R={r} S={s} n={n:>2}: examples/s real {first.examples_per_second:8.1f}, again "
                  f"{second.examples_per_second:8.1f}, simulated {sim.examples_per_second:8.1f}, fitted "
                  f"{sim_fit.examples_per_second:8.1f}; staleness real {first.staleness:5.2f}, again "
                  f"{second.staleness:5.2f}, simulated {sim.staleness:5.2f}, fitted {sim_fit.staleness:5.2f}",
                  flush=True)
        sandblaster = (sandblaster_part(emulated, client, data, profile, args.cpu, args.slow, args.iterations)
                       if "sandblaster" in parts else [])
    partitioned = partitioned_part(args) if "partitioned" in parts else None

    def err(row: dict, kind: str, field: str) -> float:
        """Relative error; a staleness under one step is compared in steps (its relative error near 0 is noise:
        0.00 against 0.14)."""
        floor = 1.0 if field == "staleness" else 1e-9
        return abs(row[kind][field] - row["real"][field]) / max(floor, abs(row["real"][field]))

    summary: dict = {}
    for field in ("examples_per_second", "staleness") if rows else ():
        summary[field] = {}
        for kind in ("simulated", "fitted", "again"):
            errors = [err(r, kind, field) for r in (rows[1:] if kind == "fitted" and len(rows) > 1 else rows)]
            summary[field][f"{kind}_median"], summary[field][f"{kind}_worst"] = statistics.median(errors), max(errors)
        f = summary[field]
        print(f"{field}: simulated vs real median {f['simulated_median']:.1%}, worst {f['simulated_worst']:.1%}; "
              f"fitted (the settings it was not fitted on) median {f['fitted_median']:.1%}, worst "
              f"{f['fitted_worst']:.1%}; a second real run vs the first: median {f['again_median']:.1%}, worst "
              f"{f['again_worst']:.1%}")
    if rows:
        real_eps = [r["real"]["examples_per_second"] for r in rows]
        summary["kendall_tau"] = kendall(real_eps, [r["simulated"]["examples_per_second"] for r in rows])
        summary["kendall_tau_fitted"] = kendall(real_eps, [r["fitted"]["examples_per_second"] for r in rows])
        summary["kendall_tau_again"] = kendall(real_eps, [r["again"]["examples_per_second"] for r in rows])
        print(f"Kendall's tau of the settings' order by examples/s: simulated {summary['kendall_tau']:.2f}, fitted "
              f"{summary['kendall_tau_fitted']:.2f}, a second real run {summary['kendall_tau_again']:.2f}")
    for row in sandblaster:
        real, sim = row["real"]["batch_seconds"], row["simulated"]["batch_seconds"]
        row["batch_seconds_error"] = (sim - real) / real if real else float("nan")
        row["batch_seconds_again"] = (row["again"]["batch_seconds"] - real) / real if real else float("nan")
    print(f"{len(rows)} Downpour settings, {len(sandblaster)} Sandblaster, "
          f"{'a' if partitioned else 'no'} partitioned part in {time.perf_counter() - began:.0f} s")
    write_json(args.json, "sim_vs_emulated", {"hosts": args.hosts, "link": args.link, "cpu": args.cpu,
                                              "seconds": args.seconds, "profile": profile.to_dict(), "rows": rows,
                                              "sandblaster": sandblaster, "partitioned": partitioned,
                                              "gradient_seconds": {"host": capped, "no_quota": free},
                                              "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
