"""The simulator checked against the emulated cluster (issue #47): Downpour on the speech preset, each setting run
twice for real on ``dbkit.emulate.Cluster`` (shards on hosts 1..S, replicas on the next R hosts) and once in the
simulator on the emulated cluster's profile (``dbkit.emulate.profile``: ``here`` with the links' rate and its
arithmetic rescaled to a gradient measured on a host), side by side, in one run.

    python benchmarks/sim_vs_emulated.py [--replicas 1,2,4] [--shards 1,2,4] [--n 1,16] [--seconds 12]
        [--hosts 8] [--link 100mbit] [--cpu 0.25] [--json F]

Examples per second and mean staleness of each; the simulator's error against the first real run, beside the
second real run's difference from the first (the emulation's own repeatability); Kendall's tau of the settings'
order by examples per second. Needs root; elsewhere it says what is missing and exits 2.
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


def kendall(a: list[float], b: list[float]) -> float:
    from scipy.stats import kendalltau

    return float(kendalltau(a, b).statistic) if len(a) > 1 else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default="1,2,4")
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--n", default="1,16")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--link", default="100mbit")
    ap.add_argument("--cpu", type=float, default=0.25)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from distributed import Client

    import dbkit
    from dbkit.emulate import Cluster, missing
    from dbkit.emulate.profile import emulated_profile, gradient_seconds

    why = missing()
    if why:
        print(f"sim_vs_emulated: {why}", file=sys.stderr)
        return 2
    grid = [(r, s, n) for r, s, n in itertools.product(_ints(args.replicas), _ints(args.shards), _ints(args.n))
            if r + s <= args.hosts]
    data = dbkit.load_dataset("speech")
    rows = []
    began = time.perf_counter()
    with Cluster(hosts=args.hosts, link=args.link, cpu=args.cpu) as emulated, Client(emulated.address) as client:
        free, capped = gradient_seconds(None), gradient_seconds(1)
        profile = emulated_profile(emulated.spec, capped)
        print(f"{profile.name}: a speech gradient takes {capped * 1e3:.1f} ms on a host, {free * 1e3:.1f} ms with no "
              f"quota; cpu_factor {profile.machine.cpu_factor:.2f}", flush=True)
        workers = emulated.workers()  # in host order: shards on hosts 1..S, replicas after them
        for r, s, n in grid:
            first = real_run(client, data, workers, r, s, n, args.seconds)
            second = real_run(client, data, workers, r, s, n, args.seconds)
            sim = simulated_run(profile, data, r, s, n, args.seconds)
            rows.append({"replicas": r, "shards": s, "n": n, "real": asdict(first), "again": asdict(second),
                         "simulated": asdict(sim)})
            print(f"R={r} S={s} n={n:>2}: examples/s real {first.examples_per_second:8.1f}, again "
                  f"{second.examples_per_second:8.1f}, simulated {sim.examples_per_second:8.1f}; staleness real "
                  f"{first.staleness:5.2f}, again {second.staleness:5.2f}, simulated {sim.staleness:5.2f}", flush=True)

    def err(row: dict, kind: str, field: str) -> float:
        return abs(row[kind][field] - row["real"][field]) / max(1e-9, abs(row["real"][field]))

    summary = {}
    for field in ("examples_per_second", "staleness"):
        sim_err = [err(r, "simulated", field) for r in rows]
        again_err = [err(r, "again", field) for r in rows]
        summary[field] = {"simulated_median": statistics.median(sim_err), "simulated_worst": max(sim_err),
                          "again_median": statistics.median(again_err), "again_worst": max(again_err)}
        print(f"{field}: simulated vs real median {summary[field]['simulated_median']:.1%}, worst "
              f"{summary[field]['simulated_worst']:.1%}; a second real run vs the first: median "
              f"{summary[field]['again_median']:.1%}, worst {summary[field]['again_worst']:.1%}")
    real_eps = [r["real"]["examples_per_second"] for r in rows]
    summary["kendall_tau"] = kendall(real_eps, [r["simulated"]["examples_per_second"] for r in rows])
    summary["kendall_tau_again"] = kendall(real_eps, [r["again"]["examples_per_second"] for r in rows])
    print(f"Kendall's tau of the settings' order by examples/s: simulated {summary['kendall_tau']:.2f}, a second "
          f"real run {summary['kendall_tau_again']:.2f}; {len(rows)} settings in {time.perf_counter() - began:.0f} s")
    write_json(args.json, "sim_vs_emulated", {"hosts": args.hosts, "link": args.link, "cpu": args.cpu,
                                              "seconds": args.seconds, "profile": profile.to_dict(), "rows": rows,
                                              "gradient_seconds": {"host": capped, "no_quota": free},
                                              "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
