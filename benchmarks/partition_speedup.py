"""Model partitioning: time per training step against the number of partitions K.

    python benchmarks/partition_speedup.py [--steps 10] [--json out.json]

A locally connected model and a fully connected model of similar parameter
count, each split into K in {1, 2, 4} partitions on a LocalCluster with K
workers (one BLAS thread each). A step is one forward and backward pass of a
batch of 32 on parameters already on the partitions (their gradients stay
there, as in Downpour where each partition pushes its own). Also printed:
bytes sent between partitions per step, measured and the connectivity minimum,
and the same step done by the whole network (``Network.loss_and_grad``) in a
task on one worker: the plain baseline, which K = 1 should match.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from dbkit import nn


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


def _whole_steps(net: nn.Network, X: np.ndarray, y: np.ndarray, steps: int) -> list[float]:
    from threadpoolctl import threadpool_limits

    params = net.init_params(0)
    times = []
    with threadpool_limits(1):
        net.loss_and_grad(params, X, y)  # warm-up
        for _ in range(steps):
            t = time.perf_counter()
            net.loss_and_grad(params, X, y)
            times.append(time.perf_counter() - t)
    return times


def measure_whole(net: nn.Network, steps: int, batch: int = 32) -> float:
    """ms per step of the unpartitioned network in a task on one worker (median)."""
    from dbkit.cluster import Cluster

    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    with Cluster(n_workers=1) as cluster:
        times = cluster.client.submit(_whole_steps, net, X, y, steps, pure=False).result()
    return 1e3 * float(np.median(times))


def measure(net: nn.Network, k: int, steps: int, batch: int = 32) -> dict:
    from dbkit.cluster import Cluster
    from dbkit.cluster.partitioned import PartitionedReplica

    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    with Cluster(n_workers=k) as cluster:
        replica = PartitionedReplica(cluster, net, k)
        replica.set_params(net.init_params(0))
        replica.load_batch(X, y)  # partitions hold their data, as in training
        b0 = sum(r["bytes_sent"] for r in replica.run(None, None, return_grad=False))  # warm-up
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            results = replica.run(None, None, return_grad=False)
            times.append(time.perf_counter() - t)
        sent = sum(r["bytes_sent"] for r in results)
        per_step = (sent - b0) / steps if k > 1 else 0  # bytes_sent is cumulative per partition
    return {"k": k, "step_ms": 1e3 * float(np.median(times)), "bytes_per_step": per_step,
            "min_bytes_per_step": replica.minimum_bytes(batch)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    out = {}
    for name, net in models().items():
        whole = measure_whole(net, args.steps)
        rows = [measure(net, k, args.steps) for k in map(int, args.ks.split(","))]
        for r in rows:
            r["speedup"] = rows[0]["step_ms"] / r["step_ms"]
            r["speedup_vs_whole"] = whole / r["step_ms"]
        out[name] = {"parameters": net.size, "whole_ms": whole, "rows": rows}
        print(f"\n{net.name}: {net.size:,} parameters; whole network in one worker: {whole:.1f} ms/step")
        print(f"{'K':>3} {'ms/step':>9} {'speedup':>8} {'vs whole':>9} {'bytes/step':>12} {'minimum':>12}")
        for r in rows:
            print(f"{r['k']:>3} {r['step_ms']:>9.1f} {r['speedup']:>8.2f} {r['speedup_vs_whole']:>9.2f} "
                  f"{r['bytes_per_step']:>12,.0f} {r['min_bytes_per_step']:>12,}")
    local2 = [r for r in out["local"]["rows"] if r["k"] == 2]
    dense2 = [r for r in out["dense"]["rows"] if r["k"] == 2]
    if local2 and dense2:
        print(f"\ntarget (locally connected, K=2 at least 1.5x faster than K=1): {local2[0]['speedup']:.2f}x; "
              f"fully connected at K=2: {dense2[0]['speedup']:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "partition_speedup", "machine": platform.platform(), **out}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
