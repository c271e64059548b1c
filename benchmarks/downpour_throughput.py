"""Downpour SGD throughput against the single-process sync SGD baseline.

    python benchmarks/downpour_throughput.py [--seconds 5] [--json out.json]

For the ``speech`` preset (compute-bound) and digits (communication-bound):
examples per second of the sync SGD baseline in this process, then of
Downpour with 1, 2 and 4 replicas and n_fetch = n_push in {1, 4, 16} on a
2-worker LocalCluster. Every process uses one BLAS thread (threadpoolctl), so
the comparison is of processes, not of BLAS threading. Each Downpour rate is
measured over a window after a warm-up, from the replicas' own example counts.
"""

from __future__ import annotations

import argparse
import time

from threadpoolctl import threadpool_limits

from dbkit import data, nn
from dbkit.algorithms import SGDTrainer

from common import write_json

CASES = {"speech": dict(dataset="speech", model="speech", lr=0.05, batch_size=32),
         "digits": dict(dataset="digits", model="mlp", lr=0.05, batch_size=32)}


def baseline(case: dict, seconds: float) -> dict:
    ds = data.load(case["dataset"])
    net = nn.build(case["model"], ds.n_features, ds.n_classes, l2=1e-4)
    trainer = SGDTrainer(net, ds, case["batch_size"], case["lr"])
    with threadpool_limits(1):
        for _ in range(20):
            trainer.step()
        n0, t0 = trainer.counters.examples, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            trainer.step()
        dt = time.perf_counter() - t0
    eps = (trainer.counters.examples - n0) / dt
    return {"examples_per_second": eps, "step_ms": 1e3 * case["batch_size"] / eps, "parameters": net.size}


def downpour(client, case: dict, replicas: int, n: int, seconds: float, shards: int = 2) -> dict:
    from dbkit import DownpourSGD

    with DownpourSGD(case["model"], case["dataset"], replicas=replicas, shards=shards, n_fetch=n, n_push=n,
                     optimizer="adagrad", lr=case["lr"], batch_size=case["batch_size"], client=client,
                     eval_every=10**9) as job:
        job.fit(seconds=min(2.0, seconds), progress=False)  # warm-up: replicas started, first fetches done
        figures = job.replicas()
        e0 = sum(f.examples for f in figures)
        s0 = {f.replica: f.steps for f in figures}
        t0 = time.perf_counter()
        job.fit(seconds=seconds, progress=False)
        dt = time.perf_counter() - t0
        figures = job.replicas()
        examples = sum(f.examples for f in figures) - e0
        steps = {f.replica: f.steps - s0.get(f.replica, 0) for f in figures}
    eps = examples / dt
    per_replica_step_ms = 1e3 * dt / (sum(steps.values()) / len(steps))
    return {"replicas": replicas, "n_fetch": n, "n_push": n, "examples_per_second": eps,
            "replica_step_ms": per_replica_step_ms}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="measuring window per configuration")
    p.add_argument("--cases", default="speech,digits")
    p.add_argument("--replicas", default="1,2,4")
    p.add_argument("--n", default="1,4,16", help="values of n_fetch = n_push")
    p.add_argument("--shards", type=int, default=2, help="parameter shards (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="override the cases' batch size (32)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    from dbkit.cluster import Cluster

    results = {}
    with Cluster(n_workers=2) as cluster:
        for name in args.cases.split(","):
            case = dict(CASES[name], **({"batch_size": args.batch_size} if args.batch_size else {}))
            base = baseline(case, args.seconds)
            rows = [downpour(cluster.client, case, r, n, args.seconds, args.shards)
                    for r in map(int, args.replicas.split(",")) for n in map(int, args.n.split(","))]
            for row in rows:
                row["speedup"] = row["examples_per_second"] / base["examples_per_second"]
            results[name] = {"baseline": base, "downpour": rows}
            print(f"\n{name}: {base['parameters']:,} parameters, batch {case['batch_size']}, {args.shards} shards; "
                  f"sync SGD baseline "
                  f"{base['examples_per_second']:.0f} examples/s ({base['step_ms']:.2f} ms/step)")
            print(f"{'replicas':>8} {'n_fetch=n_push':>14} {'examples/s':>11} {'x baseline':>10} "
                  f"{'ms/step/replica':>16}")
            for r in rows:
                print(f"{r['replicas']:>8} {r['n_fetch']:>14} {r['examples_per_second']:>11.0f} "
                      f"{r['speedup']:>10.2f} {r['replica_step_ms']:>16.2f}")
    if "speech" in results:
        hit = [r for r in results["speech"]["downpour"] if r["replicas"] == 2 and r["n_push"] == 4]
        if hit:
            print(f"\ntarget (speech, 2 replicas, n_fetch = n_push = 4 >= 1.6x baseline): {hit[0]['speedup']:.2f}x")
    if "digits" in results:
        hit = [r for r in results["digits"]["downpour"] if r["replicas"] == 1 and r["n_push"] == 1]
        if hit:
            overhead = hit[0]["replica_step_ms"] - results["digits"]["baseline"]["step_ms"]
            print(f"target (digits, framework overhead per step at n_fetch = n_push = 1 <= 3 ms): {overhead:.2f} ms")
    write_json(args.json, "downpour_throughput", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
