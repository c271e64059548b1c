"""``dbkit emulate up|down|status``: an emulated cluster kept between commands (``dbkit.emulate``)."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:  # noqa: ANN001 - argparse's subparsers action
    p = sub.add_parser("emulate", help="an emulated cluster on this machine: hosts with shaped links and CPU shares",
                       description="Build (up), inspect (status) or remove (down) an emulated cluster: hosts as "
                       "network namespaces on 198.18.0.0/24, each link shaped by tc and each host's processes "
                       "under a CPU quota, with a Dask scheduler and one worker per host. Needs root.")
    actions = p.add_subparsers(dest="action", required=True, metavar="{up,down,status}")
    up = actions.add_parser("up", help="build the hosts and start the scheduler and workers")
    up.add_argument("--hosts", type=int, default=4, help="emulated hosts, one Dask worker each (default 4)")
    up.add_argument("--link", default="100mbit", help="each host's link rate both ways, as tc spells it "
                    "(default 100mbit)")
    up.add_argument("--cpu", type=float, default=0.25, help="each host's share of one core (default 0.25)")
    up.add_argument("--threads", type=int, default=2, help="threads per worker (default 2)")
    actions.add_parser("down", help="stop the scheduler and workers and remove everything dbkit emulate made")
    actions.add_parser("status", help="what is running, and where")


def run(args: argparse.Namespace) -> int:
    """Run ``dbkit emulate ACTION``; 2 with one line if this machine cannot (not root, no namespaces ...)."""
    from ..emulate import Cluster, ClusterState, ClusterUp, EmulationUnavailable, leftovers, missing, running, tear_down

    why = missing()
    if why:
        print(f"dbkit emulate: {why}", file=sys.stderr)
        return 2
    if args.action == "up":
        try:
            cluster = Cluster(args.hosts, args.link, args.cpu, args.threads)
        except ValueError as e:
            print(f"dbkit emulate: error: {e}", file=sys.stderr)
            return 2
        try:
            cluster.start()
        except (EmulationUnavailable, ClusterUp) as e:
            print(f"dbkit emulate: {e}", file=sys.stderr)
            return 2
        state = cluster.state
        assert state is not None
        cluster.detach()  # it outlives this command, until `dbkit emulate down`
        print(f"emulated cluster up: {args.hosts} hosts ({', '.join(state.hosts)}), links {args.link}, "
              f"{args.cpu} core each")
        print(f"scheduler: {state.address}   (dbkit run downpour --scheduler {state.address} ...)")
        print("stop it with: dbkit emulate down")
        return 0
    if args.action == "down":
        found = leftovers()
        tear_down()
        print(f"removed {len(found)} namespaces, links and CPU groups" if found else "nothing to remove")
        return 0
    state = ClusterState.load()
    found = leftovers()
    if state is None:
        print("no emulated cluster is up" + (f" (left over: {', '.join(found)}; dbkit emulate down removes them)"
                                              if found else ""))
        return 0
    s = state.spec
    print(f"emulated cluster: {s.hosts} hosts, links {s.link}, {s.cpu} core each; scheduler {state.address}")
    for name, pid in state.pids.items():
        where = "198.18.0.254" if name == "scheduler" else state.hosts[int(name.split("-")[1]) - 1]
        print(f"  {name:<10} {where:<14} pid {pid:<8} {'running' if running(pid) else 'NOT RUNNING'}")
    print(f"logs: {state.logs}")
    return 0
