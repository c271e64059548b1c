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


def threads(pids: list[int]) -> int:
    """The threads of ``pids`` (``/proc/<pid>/task``: every thread, Python's and the libraries' own)."""
    return sum(len(list(Path(f"/proc/{pid}/task").glob("*"))) for pid in pids)


def python_threads() -> Counter[str]:
    """Python's threads of this process, by name with its digits dropped (``dbkit-wire-serve``)."""
    import threading

    return Counter("".join(c for c in t.name if not c.isdigit()).strip("-_ ") for t in threading.enumerate())


def named(cluster) -> Counter[str]:
    """Python's threads of this process and of every worker, by name."""
    total = python_threads()
    for counts in cluster.client.run(python_threads).values():
        total.update(counts)
    return total


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
        base, base_named = threads(family()), named(cluster)
        with dbkit.DownpourSGD("linear", "digits", client=cluster.client, replicas=args.replicas,
                               shards=args.shards, lr=0.05) as job:
            job.fit(seconds=args.seconds, progress=False)
            job.resume(wait=True)
            total, by_name = threads(family()), named(cluster)
    print(f"{args.replicas} replicas, {args.shards} shards, {args.workers} workers: {total} threads across "
          f"{args.workers + 1} processes (the cluster alone: {base}; the job's: {total - base}); Python's by name:")
    for name, n in (by_name - base_named).most_common():
        print(f"  {n:4d}  {name}")
    write_json(args.json, "thread_count", {"replicas": args.replicas, "shards": args.shards,
                                           "workers": args.workers, "threads": total, "cluster_alone": base,
                                           "python_threads_by_name": dict(by_name)})


if __name__ == "__main__":
    main()
