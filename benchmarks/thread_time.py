"""Where each thread's time goes in a 2-replica Downpour, against Downpour with no framework (Linux only).

    python benchmarks/thread_time.py [--n 4] [--seconds 8] [--optimizer sgd]

Runs the ``speech`` preset with 2 replicas and 2 shards on a 2-worker
LocalCluster, then ``bare_downpour.py``'s two bare processes, and for every
busy thread of the worker (or bare) processes reads ``/proc/<pid>/task/*/schedstat``
over a window: milliseconds per replica step spent running, waiting on a
run queue for a core, and asleep (on a socket, a lock or the GIL). The
machine's idle cores come from ``/proc/stat``. This is how the gap between
dbkit and the bare Downpour was taken apart (``docs/benchmarks.md``, issue #12).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass

from threadpoolctl import threadpool_limits

from bare_downpour import bare_downpour
from common import write_json
from downpour_throughput import CASES


@dataclass(frozen=True)
class ThreadTime:
    process: int
    thread: str
    run_ms: float  # per replica step
    queued_ms: float
    asleep_ms: float


def _schedstat(pid: int) -> dict[int, tuple[float, float]]:
    """Per thread id: (seconds run, seconds waited on a run queue)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, queued, _ = f.read().split()
            out[int(tid)] = (int(run) / 1e9, int(queued) / 1e9)
        except OSError:
            pass
    return out


def _idle() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return fields[3], sum(fields)


def measure(pids: list[int], seconds: float, names: dict[int, str] | None = None) -> tuple[dict, float, float]:
    """Per (pid, thread name): (run, queued) seconds over ``seconds``; the window; the machine's idle cores."""
    before, (i0, t0), w0 = {p: _schedstat(p) for p in pids}, _idle(), time.perf_counter()
    time.sleep(seconds)
    after, (i1, t1), dt = {p: _schedstat(p) for p in pids}, _idle(), time.perf_counter() - w0
    totals: dict = defaultdict(lambda: [0.0, 0.0])
    for p in pids:
        for tid, (run, queued) in after[p].items():
            r0, q0 = before[p].get(tid, (0.0, 0.0))
            key = (p, (names or {}).get(tid, f"thread {tid}" if tid != p else "main"))
            totals[key][0] += run - r0
            totals[key][1] += queued - q0
    return dict(totals), dt, os.cpu_count() * (i1 - i0) / max(1, t1 - t0)


def _rows(totals: dict, dt: float, steps: float) -> list[ThreadTime]:
    rows = [ThreadTime(p, name, 1e3 * run / steps, 1e3 * queued / steps, 1e3 * (dt - run - queued) / steps)
            for (p, name), (run, queued) in totals.items() if run / dt > 0.01]
    return sorted(rows, key=lambda r: (r.process, -r.run_ms))


def dbkit_threads(n: int, seconds: float, optimizer: str) -> tuple[list[ThreadTime], float, float]:
    from dbkit import DownpourSGD
    from dbkit.runtime.dask import Cluster

    case = CASES["speech"]
    with Cluster(n_workers=2) as cluster, threadpool_limits(1):
        with DownpourSGD(case["model"], case["dataset"], replicas=2, shards=2, n_fetch=n, n_push=n,
                         optimizer=optimizer, lr=case["lr"] if optimizer == "sgd" else case["adagrad_lr"],
                         batch_size=case["batch_size"], client=cluster.client, eval_every=10**9) as job:
            job.fit(seconds=2.0, progress=False)
            runner = threading.Thread(target=job.fit, kwargs={"seconds": seconds + 60, "progress": False})
            runner.start()
            time.sleep(1.0)
            names: dict[int, str] = {}
            for found in cluster.client.run(lambda: {t.native_id: t.name for t in threading.enumerate()}).values():
                names.update(found)
            pids = list(cluster.client.run(os.getpid).values())
            s0 = sum(f.steps for f in job.replicas())
            totals, dt, idle = measure(pids, seconds, names)
            steps = (sum(f.steps for f in job.replicas()) - s0) / 2
            job.pause()
            runner.join()
    return _rows(totals, dt, steps), 1e3 * dt / steps, idle


def bare_threads(n: int, seconds: float) -> tuple[list[ThreadTime], float, float]:
    case = CASES["speech"]
    seen: dict = {}

    def during(pids: list[int]) -> None:
        time.sleep(0.5)
        seen["totals"], seen["dt"], seen["idle"] = measure(pids, seconds - 1.0)

    rate = bare_downpour(case, n, seconds, during=during)
    step_ms = 1e3 * 2 * case["batch_size"] / rate  # per replica
    return _rows(seen["totals"], seen["dt"], 1e3 * seen["dt"] / step_ms), step_ms, seen["idle"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4, help="n_fetch = n_push")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--optimizer", default="sgd", choices=("sgd", "adagrad"), help="dbkit's shards' rule (the bare "
                   "Downpour applies SGD)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    results = {}
    for name, (rows, step_ms, idle) in {"dbkit": dbkit_threads(args.n, args.seconds, args.optimizer),
                                        "bare": bare_threads(args.n, args.seconds)}.items():
        results[name] = {"step_ms": step_ms, "idle_cores": idle, "threads": [vars(r) for r in rows]}
        print(f"\n{name}: {step_ms:.2f} ms per replica step; idle cores {idle:.2f}")
        print(f"{'process':>8} {'thread':<34} {'run':>6} {'queued':>7} {'asleep':>7}   (ms per replica step)")
        for r in rows:
            print(f"{r.process:>8} {r.thread[:34]:<34} {r.run_ms:>6.2f} {r.queued_ms:>7.2f} {r.asleep_ms:>7.2f}")
    write_json(args.json, "thread_time", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
