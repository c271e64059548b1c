"""Downpour SGD throughput against the single-process sync SGD baseline, and against the machine's ceiling.

    python benchmarks/downpour_throughput.py [--seconds 5] [--overlap both] [--json out.json]

For the ``speech`` preset (compute-bound) and digits (communication-bound):
examples per second of the sync SGD baseline in this process, then of
Downpour with 1, 2 and 4 replicas and n_fetch = n_push in {1, 4, 16} on a
2-worker LocalCluster, with the replicas' fetches and pushes overlapped with
their computing (the paper's client) and blocking. Every process uses one BLAS
thread (threadpoolctl), so the comparison is of processes, not of BLAS
threading. Each Downpour rate is measured over a window after a warm-up, from
the replicas' own example counts.

The ceiling, measured in the same run: two single-threaded processes computing
the same gradients at once, with no communication at all, against one alone.
Two replicas cannot beat it; the target is a fraction of it.
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


def _sgd_rate(case: dict, seconds: float, start=None) -> tuple[float, int]:
    """Sync SGD in this process with one BLAS thread: (examples per second over ``seconds`` after a warm-up
    and, if given, after ``start`` is set; the network's parameter count)."""
    ds = data.load(case["dataset"])
    net = nn.build(case["model"], ds.n_features, ds.n_classes, l2=1e-4)
    trainer = SGDTrainer(net, ds, case["batch_size"], case["lr"])
    with threadpool_limits(1):
        for _ in range(20):
            trainer.step()
        if start is not None:
            start.wait()
        n0, t0 = trainer.counters.examples, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            trainer.step()
        return (trainer.counters.examples - n0) / (time.perf_counter() - t0), net.size


def baseline(case: dict, seconds: float) -> dict:
    eps, parameters = _sgd_rate(case, seconds)
    return {"examples_per_second": eps, "step_ms": 1e3 * case["batch_size"] / eps, "parameters": parameters}


def _gradients_for(case: dict, seconds: float, start, out) -> None:
    """In a process of its own: compute gradients for ``seconds`` once ``start`` is set; put examples/s."""
    out.put(_sgd_rate(case, seconds, start)[0])


def ceiling(case: dict, seconds: float) -> dict:
    """Examples per second of 1 and of 2 bare processes computing at once (no Dask, no communication)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    rates = {}
    for k in (1, 2):
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_gradients_for, args=(case, seconds, start, out)) for _ in range(k)]
        for proc in procs:
            proc.start()
        time.sleep(3.0)  # both loaded and warm before the window opens
        start.set()
        rates[k] = sum(out.get(timeout=seconds + 120) for _ in procs)
        for proc in procs:
            proc.join()
    return {"one": rates[1], "two": rates[2], "ratio": rates[2] / rates[1]}


def downpour(client, case: dict, replicas: int, n: int, seconds: float, shards: int = 2,
             overlap: bool = True) -> dict:
    from dbkit import DownpourSGD

    with DownpourSGD(case["model"], case["dataset"], replicas=replicas, shards=shards, n_fetch=n, n_push=n,
                     optimizer="adagrad", lr=case["lr"], batch_size=case["batch_size"], client=client,
                     eval_every=10**9, overlap=overlap) as job:
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
    return {"replicas": replicas, "n_fetch": n, "n_push": n, "overlap": overlap, "examples_per_second": eps,
            "replica_step_ms": per_replica_step_ms}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=5.0, help="measuring window per configuration")
    p.add_argument("--cases", default="speech,digits")
    p.add_argument("--replicas", default="1,2,4")
    p.add_argument("--n", default="1,4,16", help="values of n_fetch = n_push")
    p.add_argument("--shards", type=int, default=2, help="parameter shards (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=None, help="override the cases' batch size (32)")
    p.add_argument("--overlap", choices=("both", "on", "off"), default="both",
                   help="replicas that overlap fetch and push with computing, blocking ones, or both")
    p.add_argument("--no-ceiling", dest="ceiling", action="store_false", help="skip the 2-process ceiling")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    from dbkit.cluster import Cluster

    results = {}
    with Cluster(n_workers=2) as cluster:
        for name in args.cases.split(","):
            case = dict(CASES[name], **({"batch_size": args.batch_size} if args.batch_size else {}))
            base = baseline(case, args.seconds)
            if args.ceiling:
                base["ceiling"] = ceiling(case, args.seconds)
            modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.overlap]
            rows = [downpour(cluster.client, case, r, n, args.seconds, args.shards, overlap)
                    for r in map(int, args.replicas.split(",")) for n in map(int, args.n.split(","))
                    for overlap in modes]
            for row in rows:
                row["speedup"] = row["examples_per_second"] / base["examples_per_second"]
            results[name] = {"baseline": base, "downpour": rows}
            print(f"\n{name}: {base['parameters']:,} parameters, batch {case['batch_size']}, {args.shards} shards; "
                  f"sync SGD baseline "
                  f"{base['examples_per_second']:.0f} examples/s ({base['step_ms']:.2f} ms/step)")
            if "ceiling" in base:
                print(f"ceiling: 2 bare processes computing at once give {base['ceiling']['ratio']:.2f}x one alone")
            print(f"{'replicas':>8} {'n_fetch=n_push':>14} {'overlap':>7} {'examples/s':>11} {'x baseline':>10} "
                  f"{'ms/step/replica':>16}")
            for r in rows:
                print(f"{r['replicas']:>8} {r['n_fetch']:>14} {'on' if r['overlap'] else 'off':>7} "
                      f"{r['examples_per_second']:>11.0f} {r['speedup']:>10.2f} {r['replica_step_ms']:>16.2f}")
    def row(name, replicas, n, overlap=True):
        return next((r for r in results.get(name, {}).get("downpour", [])
                     if (r["replicas"], r["n_push"], r["overlap"]) == (replicas, n, overlap)), None)

    two, one = row("speech", 2, 4), row("speech", 1, 1)
    if two and "ceiling" in results["speech"]["baseline"]:
        ratio = results["speech"]["baseline"]["ceiling"]["ratio"]
        print(f"\ntarget (speech, 2 replicas, n = 4, at least 85% of the ceiling {ratio:.2f}x): {two['speedup']:.2f}x "
              f"= {two['speedup'] / ratio:.0%} of it")
    if one:
        print(f"target (speech, 1 replica, n = 1, at least 0.8x the baseline): {one['speedup']:.2f}x")
    digits = row("digits", 1, 1)
    if digits:
        overhead = digits["replica_step_ms"] - results["digits"]["baseline"]["step_ms"]
        print(f"target (digits, framework overhead per step at n = 1, at most 1.5 ms): {overhead:.2f} ms")
    write_json(args.json, "downpour_throughput", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
