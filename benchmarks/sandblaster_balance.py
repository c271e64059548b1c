"""Sandblaster batch time with a slow replica: load balancing and backup tasks at work.

    python benchmarks/sandblaster_balance.py [--batches 5] [--factor 5] [--json out.json]

3 replicas on a 2-worker LocalCluster (2 threads each), the speech preset on the
speech dataset, work units of 100 examples. For each setting it times whole
batch gradients (``SandblasterLBFGS.batch_gradient`` on a paused job) and
prints the median, against the balanced run with no slow replica. A slowed replica sleeps (factor - 1) times each unit's
compute time (at least 10 ms per unit).
"""

from __future__ import annotations

import argparse

import numpy as np

from common import write_json

SETTINGS = [
    ("balanced + backups, no slow replica", dict(balance=True, backup=True), False),
    ("balanced + backups, one slow replica", dict(balance=True, backup=True), True),
    ("balanced, no backups, one slow replica", dict(balance=True, backup=False), True),
    ("static equal split, one slow replica", dict(balance=False, backup=False), True),
    ("static equal split, no slow replica", dict(balance=False, backup=False), False),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--factor", type=float, default=5.0)
    p.add_argument("--dataset", default="speech")
    p.add_argument("--model", default="speech")
    p.add_argument("--work-unit-size", type=int, default=100)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    from dbkit import SandblasterLBFGS
    from dbkit.runtime.dask import Cluster
    from dbkit.data import load
    from dbkit.telemetry import BatchDone

    ds = load(args.dataset)
    rows = []
    with Cluster(n_workers=2, threads_per_worker=2) as cluster:
        # the first setting is run twice: its first run warms the workers up and is not reported
        for label, opts, slow in [SETTINGS[0], *SETTINGS]:
            with SandblasterLBFGS(args.model, ds, replicas=3, shards=2, work_unit_size=args.work_unit_size,
                                  slow_replicas={0: args.factor} if slow else {}, client=cluster.client,
                                  **opts) as sb:
                sb.start()
                sb.pause()  # L-BFGS waits: the batches below are timed alone
                sb.batch_gradient()  # warm-up
                first = len(sb.events.of(BatchDone))
                done_before = dict(sb.dispatcher.units_done)
                for _ in range(args.batches):
                    sb.batch_gradient()
                d = sb.dispatcher
                seconds = [e.seconds for e in sb.events.of(BatchDone)[first:]]
                rows.append({"setting": label, "median_batch_seconds": float(np.median(seconds)),
                             "units_per_replica": {i: n - done_before.get(i, 0) for i, n in d.units_done.items()},
                             "backups_issued": d.backups_issued, "backups_won": d.backups_won,
                             "units_per_batch": len(d.units)})
    rows = rows[1:]
    base = rows[0]["median_batch_seconds"]
    print(f"{args.model} on {args.dataset}: {rows[0]['units_per_batch']} work units per batch, 3 replicas, "
          f"slow factor {args.factor}")
    print(f"{'setting':<42} {'batch s':>8} {'x fast':>7} {'units per replica':>22} {'backups won/issued':>19}")
    for r in rows:
        r["ratio"] = r["median_batch_seconds"] / base
        units = "/".join(str(r["units_per_replica"].get(i, 0)) for i in range(3))
        print(f"{r['setting']:<42} {r['median_batch_seconds']:>8.3f} {r['ratio']:>7.2f} {units:>22} "
              f"{r['backups_won']:>9}/{r['backups_issued']:<9}")
    print(f"target (slow replica with balancing and backups <= 1.3x the batch time without it): "
          f"{rows[1]['ratio']:.2f}x")
    write_json(args.json, "sandblaster_balance", {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
