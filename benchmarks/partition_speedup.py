"""Model partitioning: time per training step against the number of partitions K.

    python benchmarks/partition_speedup.py [--steps 10] [--json out.json]

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
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dbkit import nn

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


def _whole_step(net: nn.Network, params: np.ndarray, X: np.ndarray, y: np.ndarray) -> float:
    """One step of the unpartitioned network inside a task; returns its seconds."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        t = time.perf_counter()
        net.loss_and_grad(params, X, y)
        return time.perf_counter() - t


def measure(net: nn.Network, k: int, steps: int, batch: int = 32) -> dict:
    """ms per step (medians) on a LocalCluster with ``k`` workers: the whole network in a task on one
    worker, the network in 1 partition (on one worker) and in ``k`` partitions (one per worker).

    The three are interleaved step after step (``time_partitioned_step`` with the whole network as its
    baseline), so a slow spell of the machine hits them alike and their ratios are measured in one run.
    """
    from dbkit.runtime.dask import Cluster, time_partitioned_step

    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
    y = rng.integers(0, net.n_classes, batch)
    with Cluster(n_workers=k) as cluster:
        first, client = cluster.workers()[0], cluster.client
        args = client.scatter([net, net.init_params(0), X, y], workers=[first], broadcast=False)

        def whole() -> float:
            return client.submit(_whole_step, *args, workers=[first], pure=False).result()

        whole()  # warm-up
        s = time_partitioned_step(cluster, net, k, steps, batch, baseline=whole)
    row = {"k": k, "step_ms": s.step_ms, "k1_ms": s.k1_ms, "whole_ms": s.baseline_ms,
           "bytes_per_step": s.bytes_per_step, "min_bytes_per_step": s.min_bytes_per_step}
    row["speedup"] = row["k1_ms"] / row["step_ms"]
    row["speedup_vs_whole"] = row["whole_ms"] / row["step_ms"]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ks", default="1,2,4")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    out = {}
    for name, net in models().items():
        rows = [measure(net, k, args.steps) for k in [int(k) for k in args.ks.split(",")]]
        out[name] = {"parameters": net.size, "rows": rows}
        print(f"\n{net.name}: {net.size:,} parameters")
        print(f"{'K':>3} {'ms/step':>9} {'K=1 ms':>8} {'whole ms':>9} {'speedup':>8} {'vs whole':>9} "
              f"{'bytes/step':>12} {'minimum':>12}")
        for r in rows:
            print(f"{r['k']:>3} {r['step_ms']:>9.1f} {r['k1_ms']:>8.1f} {r['whole_ms']:>9.1f} {r['speedup']:>8.2f} "
                  f"{r['speedup_vs_whole']:>9.2f} {r['bytes_per_step']:>12,.0f} {r['min_bytes_per_step']:>12,}")
    local2 = [r for r in out["local"]["rows"] if r["k"] == 2]
    dense2 = [r for r in out["dense"]["rows"] if r["k"] == 2]
    if local2 and dense2:
        print(f"\ntarget (locally connected, K=2 at least 1.5x faster than K=1): {local2[0]['speedup']:.2f}x; "
              f"fully connected at K=2: {dense2[0]['speedup']:.2f}x")
    write_json(args.json, "partition_speedup", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
