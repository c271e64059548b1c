"""Model partitioning: time per training step against the number of partitions K.

    python benchmarks/partition_speedup.py [--steps 10] [--ks 1,2,4] [--transport socket,actor] [--json out.json]

A locally connected model and a fully connected model of similar parameter
count, split into K in {1, 2, 4} partitions on a LocalCluster with K workers
(one BLAS thread each). A step is one forward and backward pass of a batch of
32 on parameters already on the partitions (their gradients stay there, as in
Downpour where each partition pushes its own). In each K's cluster the same
step is also timed with 1 partition and with the whole network
(``Network.loss_and_grad`` in a task on one worker, the plain baseline),
interleaved step after step, so the ratios come from one run under the same
conditions. Also printed: bytes sent between partitions per step, measured and
the connectivity minimum.

With ``--transport socket`` (what Downpour's partitioned replicas use) the
partitions exchange boundary slices over their own wire and each step is
started by partition 0, from a task beside it, with one message to each
partner; ``actor`` is the earlier path (an actor call per slice, and one per
partition per step, from this process). At K = 2 the bare partitioned step
(``bare_partition.py``: the same arithmetic in two plain processes over a raw
loopback socket) is measured between dbkit's rows, and dbkit's step is given
as a fraction of its speed.
"""

from __future__ import annotations

import argparse
import statistics


from dbkit import nn

from bare_partition import bare_step_ms
from common import write_json


def models() -> dict[str, nn.Network]:
    l1 = nn.LocallyConnected2D(64, 64, 1, kernel=5, filters=16)  # 60x60x16
    l2 = nn.LocallyConnected2D(*l1.out_shape, kernel=3, filters=8)  # 58x58x8
    l3 = nn.LocallyConnected2D(*l2.out_shape, kernel=4, filters=4, stride=2)  # 28x28x4: a small head
    local = nn.Network([l1, nn.ReLU(l1.out_size), l2, nn.ReLU(l2.out_size), l3, nn.ReLU(l3.out_size),
                        nn.Dense(l3.out_size, 10)], name="locally connected")
    hidden = 2048
    full = nn.Network([nn.Dense(4096, hidden), nn.ReLU(hidden), nn.Dense(hidden, 512), nn.ReLU(512),
                       nn.Dense(512, 10)], name="fully connected")
    return {"local": local, "dense": full}


def measure(net: nn.Network, k: int, steps: int, batch: int = 32, transport: str = "socket") -> dict:
    """ms per step (medians) on a LocalCluster with ``k`` workers: the whole network in a task on one
    worker, the network in 1 partition (on one worker) and in ``k`` partitions (one per worker).

    The three are interleaved step after step (``time_partitioned_step`` with ``whole=True``), so a slow
    spell of the machine hits them alike and their ratios are measured in one run.
    """
    from dbkit.calibration import time_partitioned_step
    from dbkit.runtime.dask import Cluster

    with Cluster(n_workers=k) as cluster:
        s = time_partitioned_step(cluster, net, k, steps, batch, whole=True, transport=transport)
    row = {"k": k, "transport": transport, "step_ms": s.step_ms, "k1_ms": s.k1_ms, "whole_ms": s.baseline_ms,
           "bytes_per_step": s.bytes_per_step, "min_bytes_per_step": s.min_bytes_per_step}
    row["speedup"] = row["k1_ms"] / row["step_ms"]
    row["speedup_vs_whole"] = row["whole_ms"] / row["step_ms"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--transport", default="socket", help="comma-separated: socket (the partition wire, partition 0 "
                   "leads each step from a task beside it), actor (an actor call per slice and per partition)")
    p.add_argument("--no-bare", dest="bare", action="store_false", help="skip the bare K = 2 step")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    ks, transports = [int(k) for k in args.ks.split(",")], args.transport.split(",")
    out = {}
    for name, net in models().items():
        rows, bare = [], []
        for k in ks:
            for transport in transports:
                rows.append(measure(net, k, args.steps, transport=transport))
                if k == 2 and args.bare:  # the ceiling, measured between dbkit's rows
                    bare.append(bare_step_ms(name, args.steps))
        out[name] = {"parameters": net.size, "rows": rows}
        if bare:
            out[name]["bare_ms"] = bare
            for r in rows:
                if r["k"] == 2:
                    r["bare_ms"] = statistics.median(bare)
                    r["of_bare"] = r["bare_ms"] / r["step_ms"]
        print(f"\n{net.name}: {net.size:,} parameters")
        print(f"{'K':>3} {'transport':>9} {'ms/step':>8} {'K=1 ms':>7} {'whole ms':>8} {'speedup':>8} {'vs whole':>8} "
              f"{'bytes/step':>11} {'minimum':>11} {'bare ms':>8} {'of bare':>8}")
        for r in rows:
            print(f"{r['k']:>3} {r['transport']:>9} {r['step_ms']:>8.1f} {r['k1_ms']:>7.1f} {r['whole_ms']:>8.1f} "
                  f"{r['speedup']:>8.2f} {r['speedup_vs_whole']:>8.2f} {r['bytes_per_step']:>11,.0f} "
                  f"{r['min_bytes_per_step']:>11,}"
                  + (f" {r['bare_ms']:>8.1f} {r['of_bare']:>8.0%}" if "bare_ms" in r else ""))
    first = transports[0]

    def two(name):
        return next((r for r in out[name]["rows"] if r["k"] == 2 and r["transport"] == first), None)

    local2, dense2 = two("local"), two("dense")
    if local2 and dense2:
        print(f"\ntargets ({first}): locally connected K=2 at least 1.75x K=1: {local2['speedup']:.2f}x; "
              f"fully connected K=2 at least 1.3x: {dense2['speedup']:.2f}x"
              + (f"; K=2 at least 85% of the bare step's speed: {local2['of_bare']:.0%} (locally connected), "
                 f"{dense2['of_bare']:.0%} (fully connected)" if "of_bare" in local2 else ""))
    write_json(args.json, "partition_speedup", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
