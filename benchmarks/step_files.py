"""The files one Downpour step passes through, from the replica's step to the shard's apply, on each runtime.

    python benchmarks/step_files.py [--runtimes dask,in-process,simulated] [--json PATH]

Runs ``dbkit.DownpourSGD`` (the public API) with one replica and two shards on
each runtime, with a profiler (``threading.setprofile``) installed in every
process before the job starts. It records two sets of dbkit's files:

- the replica's side: every file with a function called during the replica's
  fifth ``step()`` (its gradient, schedule, exchange, client and shard ends);
- the shard's side: the files on the stack of the thread that runs a rule's
  ``apply`` (the wire's server, a shard's call thread, or a simulated task).

A step's files are the union. Issue #45's targets: at most 15 on Dask, 13 in
process, 16 simulated (from 21, 18 and 25).
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from common import write_json

PACKAGE = Path(__file__).resolve().parent.parent  # the checkout: dbkit/... below it
STEP = 5  # which step of the replica is followed (past the warm-up of the first)


def install() -> None:
    """Profile every thread started from now on in this process (kept on the ``threading`` module)."""
    import sys

    state = {"replica": set(), "shard": set(), "steps": {}, "applies": 0}
    local = threading.local()
    marker = "/dbkit/"

    def short(path: str) -> str:
        return path[path.rindex(marker) + 1:]

    def profile(frame, event, arg):
        if event == "return" and getattr(local, "window", None) is frame:
            local.window = None
            return
        if event != "call":
            return
        path = frame.f_code.co_filename
        if marker not in path:
            return
        name = frame.f_code.co_name
        if getattr(local, "window", None) is not None:
            state["replica"].add(short(path))
        elif name == "step" and path.endswith("downpour/replica.py"):
            n = state["steps"][threading.get_ident()] = state["steps"].get(threading.get_ident(), 0) + 1
            if n == STEP:
                local.window = frame
                state["replica"].add(short(path))
        elif name in ("apply", "apply_scaled") and path.endswith(("ps/rules.py", "ps/update_rule.py")) \
                and state["applies"] < 20:
            state["applies"] += 1
            f = frame
            while f is not None:
                if marker in f.f_code.co_filename:
                    state["shard"].add(short(f.f_code.co_filename))
                f = f.f_back

    threading._dbkit_steps = state  # type: ignore[attr-defined]
    threading.setprofile(profile)
    sys.setprofile(profile)


def collected() -> dict[str, list[str]]:
    """What ``install``'s profiler saw in this process (and stop it)."""
    import sys

    threading.setprofile(None)  # type: ignore[arg-type]
    sys.setprofile(None)
    state = getattr(threading, "_dbkit_steps", None)
    if state is None:
        return {"replica": [], "shard": []}
    return {"replica": sorted(state["replica"]), "shard": sorted(state["shard"])}


def follow(runtime: str) -> dict[str, list[str]]:
    """One replica, two shards on ``runtime``: the files its step and its shards' applies passed through."""
    import dbkit

    kwargs = dict(replicas=1, shards=2, lr=0.05, eval_every=10_000)
    if runtime == "dask":
        from dbkit.runtime.dask import Cluster

        with Cluster(n_workers=2) as cluster:
            cluster.client.run(install)
            install()
            with dbkit.DownpourSGD("linear", "digits", client=cluster.client, **kwargs) as job:
                job.fit(steps=40, progress=False)
            seen = [collected()] + list(cluster.client.run(collected).values())
    elif runtime == "in-process":
        from dbkit.runtime import InProcessCluster

        install()
        with InProcessCluster(workers=2) as machines:
            with dbkit.DownpourSGD("linear", "digits", cluster=machines, **kwargs) as job:
                job.fit(steps=40, progress=False)
        seen = [collected()]
    else:
        from dbkit import sim

        install()
        with dbkit.DownpourSGD("linear", "digits", cluster=sim.Cluster(), **kwargs) as job:
            job.fit(steps=40, progress=False)
        seen = [collected()]
    return {side: sorted({f for s in seen for f in s[side]}) for side in ("replica", "shard")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtimes", default="dask,in-process,simulated")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    targets = {"dask": 15, "in-process": 13, "simulated": 16}
    rows = {}
    for runtime in args.runtimes.split(","):
        sides = follow(runtime)
        files = sorted(set(sides["replica"]) | set(sides["shard"]))
        lines = sum(len((PACKAGE / f).read_text().splitlines()) for f in files)
        rows[runtime] = {"files": len(files), "lines": lines, **sides}
        print(f"{runtime}: {len(files)} files, {lines} lines (target <= {targets.get(runtime)})")
        print("  replica's step:", ", ".join(sides["replica"]))
        print("  shard's apply: ", ", ".join(sides["shard"]))
    write_json(args.json, "step_files", rows)


if __name__ == "__main__":
    main()
