"""How fast the simulator runs: 200 simulated replicas x 1000 steps of the digits MLP with numerics, against
computing the same 200,000 gradients in a plain numpy loop, in one run; and the cost-only Fig. 3 sweep.

    python benchmarks/sim_speed.py [--replicas 200] [--steps 1000] [--json out.json]

The simulation's overhead is its time over the plain loop's: the event queue, the greenlets, the
replicas' own bookkeeping (accrue, local step, the shards' updates) and the evaluations it skips here.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from common import write_json


def batch_sizes(replicas: int, batch: int = 32) -> list[int]:
    """Each simulated replica's mini-batch: ``batch``, or all of its share of the digits' 1,438 training
    examples when that is smaller (200 replicas hold 7 or 8 each). The loops below compute gradients of
    these sizes, in turn, so that they compute the same gradients as the replicas."""
    from dbkit.data import load, shard_indices

    return [min(batch, len(rows)) for rows in shard_indices(load("digits").n_train, replicas, seed=0)]


def plain_loop(gradients: int, sizes: list[int]) -> float:
    """Seconds for ``gradients`` mini-batch gradients of the digits MLP (of ``sizes``, in turn) in a bare
    numpy loop."""
    from dbkit.data import load
    from dbkit.nn import build

    data = load("digits")
    net = build("mlp", data.n_features, data.n_classes, l2=1e-4)
    params = net.init_params(0)
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    for k in range(gradients):
        rows = rng.integers(0, data.n_train, sizes[k % len(sizes)])
        net.loss_and_grad(params, data.X_train[rows], data.y_train[rows])
    return time.perf_counter() - began


def bare_downpour(gradients: int, sizes: list[int], lr: float = 0.05, eps: float = 1e-8) -> float:
    """Seconds for the arithmetic every Downpour step with one Adagrad shard must do, in a bare numpy
    loop with no classes: the gradient, its finiteness check (one dot) and Adagrad's update on the flat
    parameters (Section 4.1) -- the ceiling the simulated run is also given against."""
    from dbkit.data import load
    from dbkit.nn import build

    data = load("digits")
    net = build("mlp", data.n_features, data.n_classes, l2=1e-4)
    params = net.init_params(0)
    state = np.full_like(params, 0.1)
    a, b = np.empty_like(params), np.empty_like(params)
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    for k in range(gradients):
        rows = rng.integers(0, data.n_train, sizes[k % len(sizes)])
        _, grad = net.loss_and_grad(params, data.X_train[rows], data.y_train[rows])
        np.isfinite(np.dot(grad, grad))
        np.multiply(grad, np.float32(lr), out=a)
        np.multiply(grad, grad, out=b)
        state += b
        np.sqrt(state, out=b)
        b += np.float32(eps)
        a /= b
        params -= a
    return time.perf_counter() - began


def same_classes(replicas: int, steps: int, shards: int, n: int = 1, batch: int = 32) -> float:
    """Seconds for the simulated run's numerics with no clock: ``replicas`` ``DownpourReplica`` s of the
    digits MLP taking turns, each step by step, on in-process shards (Adagrad) -- the floor a simulator
    that runs dbkit's own classes cannot go below."""
    from dbkit.algorithms import DownpourReplica
    from dbkit.data import load, shard_indices
    from dbkit.nn import build
    from dbkit.ps import ShardedParameters, balanced_layout, ParameterShard

    data = load("digits")
    net = build("mlp", data.n_features, data.n_classes, l2=1e-4)
    initial = net.init_params(0)
    layout = balanced_layout(net.size, shards)
    ps = [ParameterShard(i, a, b, initial[a:b], "adagrad", 0.05) for i, (a, b) in enumerate(layout.ranges)]
    rows = shard_indices(data.n_train, replicas, seed=0)
    reps = [DownpourReplica(i, net, data.X_train[rows[i]], data.y_train[rows[i]], ShardedParameters(ps, layout),
                            batch, n, n, 0.05, seed=i) for i in range(replicas)]
    began = time.perf_counter()
    for _ in range(steps):
        for r in reps:
            r.step()
    return time.perf_counter() - began


def simulated(replicas: int, steps: int, shards: int, profile: str, n: int = 1) -> tuple[float, dict]:
    from dbkit.config import RunConfig
    from dbkit.sim import Cluster, simulate

    cfg = RunConfig.make(algorithm="downpour", dataset="digits", model="mlp", replicas=replicas, shards=shards,
                         optimizer="adagrad", lr=0.05, steps=replicas * steps, eval_every=10**9, n_fetch=n, n_push=n)
    began = time.perf_counter()
    report = simulate(cfg, Cluster(profile))
    return time.perf_counter() - began, report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=200)
    p.add_argument("--steps", type=int, default=1000, help="steps per replica")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--n", type=int, default=1, help="n_fetch = n_push (default: %(default)s)")
    p.add_argument("--profile", default="distbelief-2012")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    from dbkit.sim.figures import figure3

    with threadpool_limits(1):
        gradients = args.replicas * args.steps
        sizes = batch_sizes(args.replicas)
        plain = plain_loop(gradients, sizes)
        bare = bare_downpour(gradients, sizes)
        floor = same_classes(args.replicas, args.steps, args.shards, args.n)
        sim_seconds, report = simulated(args.replicas, args.steps, args.shards, args.profile, args.n)
        began = time.perf_counter()
        figure3()
        fig3_seconds = time.perf_counter() - began
    ratio = sim_seconds / plain
    print(f"{gradients:,} gradients of the digits MLP (batches of {min(sizes)} to {max(sizes)}): plain numpy loop "
          f"{plain:.1f} s; with Adagrad's update "
          f"in the same bare loop {bare:.1f} s = {bare / plain:.2f}x; the same classes with no "
          f"clock {floor:.1f} s = {floor / plain:.2f}x; simulated ({args.replicas} replicas, {args.shards} shards, "
          f"n={args.n}, {args.profile}) {sim_seconds:.1f} s = {ratio:.2f}x the loop, {sim_seconds / bare:.2f}x the "
          f"bare loop with Adagrad, {sim_seconds / floor:.2f}x the classes alone; "
          f"{report['simulation']['events']:,} events; {report['simulation']['stacked_gradients']:,} gradients "
          f"computed in stacks")
    print(f"cost-only Fig. 3 sweep: {fig3_seconds:.3f} s")
    write_json(args.json, "sim_speed", {"replicas": args.replicas, "steps": args.steps, "shards": args.shards,
                                        "n": args.n, "batch_sizes": sorted(set(sizes)), "plain_seconds": plain,
                                        "bare_adagrad_seconds": bare,
                                        "same_classes_seconds": floor,
                                        "simulated_seconds": sim_seconds, "ratio": ratio,
                                        "overhead": sim_seconds / floor - 1,
                                        "events": report["simulation"]["events"],
                                        "stacked_gradients": report["simulation"]["stacked_gradients"],
                                        "fig3_seconds": fig3_seconds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
