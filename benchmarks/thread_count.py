"""Threads a Downpour run holds across all its processes, by name, against the floor of the same LocalCluster.

    python benchmarks/thread_count.py [--replicas 20] [--shards 8] [--workers 8] [--seconds 6] [--json PATH]

Starts ``dbkit.DownpourSGD`` (the public API, as a user does) with the given
replicas and shards on a LocalCluster of ``--workers`` processes, trains for
``--seconds``, and counts the threads of this process and of every child process
(``/proc/<pid>/task``), grouped by thread name. The floor is the same cluster
with nothing placed on it: what Dask itself holds. Issue #45's target is at most
60 threads for 20 replicas, 8 shards and 8 workers.
"""

from __future__ import annotations

import argparse
import os
from collections import Counter
from pathlib import Path

from common import write_json


def threads(pids: list[int]) -> Counter[str]:
    """The threads of ``pids``, counted by name (digits dropped: ``dbkit-wire-serve``, ``Dask-Default-Thread``)."""
    names: Counter[str] = Counter()
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip()
            except OSError:
                continue
            names["".join(c for c in name if not c.isdigit()).rstrip("-_ ")] += 1
    return names


def family() -> list[int]:
    """This process and all its descendants."""
    import psutil

    me = psutil.Process(os.getpid())
    return [me.pid] + [p.pid for p in me.children(recursive=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import dbkit
    from dbkit.runtime.dask import Cluster

    with Cluster(n_workers=args.workers) as cluster:
        floor = threads(family())
        with dbkit.DownpourSGD("linear", "digits", client=cluster.client, replicas=args.replicas,
                               shards=args.shards, lr=0.05) as job:
            job.fit(seconds=args.seconds, progress=False)
            job.resume(wait=True)
            running = threads(family())
    total, base = sum(running.values()), sum(floor.values())
    print(f"{args.replicas} replicas, {args.shards} shards, {args.workers} workers: {total} threads "
          f"(the cluster alone: {base}; the job's: {total - base})")
    for name, n in (running - floor).most_common():
        print(f"  {n:4d}  {name}")
    write_json(args.json, "thread_count", {"replicas": args.replicas, "shards": args.shards,
                                           "workers": args.workers, "threads": total, "cluster_alone": base,
                                           "by_name": dict(running)})


if __name__ == "__main__":
    main()
