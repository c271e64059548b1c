"""Threads a Downpour run holds across all its processes, by name, against the floor of the same LocalCluster.

    python benchmarks/thread_count.py [--replicas 20] [--shards 8] [--workers 8] [--seconds 6] [--json PATH]

Starts ``dbkit.DownpourSGD`` (the public API, as a user does) with the given
replicas and shards on a LocalCluster of ``--workers`` processes, trains for
``--seconds``, and counts the threads of this process and of every child process
(``/proc/<pid>/task``), grouped by thread name. The floor is the same cluster
with nothing placed on it: what Dask itself holds. The ceiling, measured in the
same run without dbkit (``--no-bare`` skips it): a plain ``LocalCluster`` of as
many workers running the paper's arrangement as DESIGN.md's Dask facts place
it, one actor per worker (called once, as a shard is) and one long-running
task per replica that ``secede()`` s, as a replica loop does. Issue #45's target
is at most 60 threads for 20 replicas, 8 shards and 8 workers.
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


class BareShard:
    """A bare actor: what a shard is to Dask, without dbkit."""

    def push(self, x: int) -> int:
        return x


def bare_replica(stop_at: float) -> int:
    """A bare long-running task: what a replica loop is to Dask, without dbkit."""
    import time

    from distributed import secede

    secede()
    while time.time() < stop_at:
        time.sleep(0.01)
    return 1


def bare_floor(workers: int, replicas: int, seconds: float = 3.0) -> tuple[int, int]:
    """Threads of a plain LocalCluster of ``workers`` processes: alone, then holding one actor per worker
    (called once) and ``replicas`` seceded tasks."""
    import time

    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as lc, \
            Client(lc) as client:
        client.wait_for_workers(workers)
        alone = threads(family())
        names = list(client.scheduler_info()["workers"])
        actors = [client.submit(BareShard, actor=True, workers=[w]).result() for w in names]
        for a in actors:
            a.push(1).result()
        stop = time.time() + seconds
        tasks = [client.submit(bare_replica, stop, workers=[names[i % workers]], pure=False)
                 for i in range(replicas)]
        time.sleep(seconds / 2)
        held = threads(family())
        client.gather(tasks)
        del actors
    return alone, held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=20)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--no-bare", action="store_true", help="skip the bare-Dask ceiling")
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
    bare = None
    if not args.no_bare:
        alone, held = bare_floor(args.workers, args.replicas)
        bare = {"cluster_alone": alone, "with_actors_and_tasks": held}
        print(f"bare Dask, no dbkit: {alone} threads alone, {held} with one actor per worker and {args.replicas} "
              f"seceded tasks: dbkit's run holds {total - held:+d} beyond that floor")
    write_json(args.json, "thread_count", {"replicas": args.replicas, "shards": args.shards,
                                           "workers": args.workers, "threads": total, "cluster_alone": base,
                                           "python_threads_by_name": dict(by_name), "bare": bare})


if __name__ == "__main__":
    main()
