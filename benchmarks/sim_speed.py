"""How fast the simulator runs: 200 simulated replicas x 250 steps of the digits MLP with numerics (8 shards,
Adagrad, the ``here`` profile), through the command a user types (``dbkit simulate downpour`` with its
report) and through the API (``fit`` on ``dbkit.sim.Cluster``), against a plain numpy loop of the same
50,000 gradients and Adagrad updates at the replicas' own batch sizes (no dbkit class), in one run; and
the cost-only Fig. 3 sweep.

    python benchmarks/sim_speed.py [--replicas 200] [--steps 250] [--shards 8] [--n 1] [--repeat 1] [--json F]

Beside the plain loop, in the same run: the same loop with Adagrad's arithmetic (one replica's Downpour
step with no framework), 200 replicas each with its own parameters, accrued gradient and data in a bare
loop (the ceiling: the same work per step as the simulated replicas', with no classes and no clock), at
n = 1 minimal replica loops calling dbkit's shard directly, and dbkit's classes stepping in turn with no
clock. The last three end with the same parameters, bit for bit. The simulation's overhead is its time over the classes'
alone: the event queue, the greenlets, the modelled cores, NICs and queues.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from common import write_json


def batch_sizes(replicas: int, batch: int = 32) -> list[int]:
    """Each simulated replica's mini-batch: ``batch``, or all of its share of the digits' 1,438 training
    examples when that is smaller (200 replicas hold 7 or 8 each). The loops below compute gradients of
    these sizes, in turn, so that they compute the same gradients as the replicas."""
    from dbkit.data import load, shard_indices

    return [min(batch, len(rows)) for rows in shard_indices(load("digits").n_train, replicas, seed=0)]


def digits_mlp():
    """The digits data and the MLP every loop here computes (``l2`` as ``dbkit run``'s default)."""
    from dbkit.data import load
    from dbkit.nn import build

    data = load("digits")
    return data, build("mlp", data.n_features, data.n_classes, l2=1e-4)


def adagrad(params: np.ndarray, grad: np.ndarray, state: np.ndarray, a: np.ndarray, b: np.ndarray, lr: float,
            eps: float) -> None:
    """Adagrad's update of ``params`` in place, as the shard applies it (``a`` and ``b`` are scratch):
    ``state += grad**2; params -= lr * grad / (sqrt(state) + eps)``."""
    np.multiply(grad, np.float32(lr), out=a)
    np.multiply(grad, grad, out=b)
    state += b
    np.sqrt(state, out=b)
    b += np.float32(eps)
    a /= b
    params -= a


def numpy_gradient(flat: np.ndarray, grad: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float = 1e-4) -> float:
    """The digits MLP's loss and gradient (64-128-10, ReLU, softmax cross-entropy, ``l2/2 ||W||^2``) in
    plain numpy, written into ``grad``: the flat vector holds ``W1, b1, W2, b2`` in that order, as dbkit's
    network does (a test checks the two agree). No dbkit class: the arithmetic alone."""
    W1, b1 = flat[:8192].reshape(64, 128), flat[8192:8320]
    W2, b2 = flat[8320:9600].reshape(128, 10), flat[9600:9610]
    gW1, gb1 = grad[:8192].reshape(64, 128), grad[8192:8320]
    gW2, gb2 = grad[8320:9600].reshape(128, 10), grad[9600:9610]
    n = len(y)
    h = x @ W1
    h += b1
    np.maximum(h, 0, out=h)
    z = h @ W2
    z += b2
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    picked = np.arange(n)
    loss = -float(np.log(p[picked, y]).mean()) + 0.5 * l2 * (float(np.dot(W1.ravel(), W1.ravel()))
                                                          + float(np.dot(W2.ravel(), W2.ravel())))
    p[picked, y] -= 1.0
    p /= n
    np.matmul(h.T, p, out=gW2)
    gW2 += np.float32(l2) * W2
    np.sum(p, axis=0, out=gb2)
    dh = p @ W2.T
    dh[h <= 0] = 0.0
    np.matmul(x.T, dh, out=gW1)
    gW1 += np.float32(l2) * W1
    np.sum(dh, axis=0, out=gb1)
    return loss


def numpy_loop(gradients: int, sizes: list[int], lr: float = 0.05, eps: float = 1e-8) -> float:
    """Seconds for ``gradients`` steps of the plain numpy floor: the MLP's gradient at the replicas' own
    batch sizes (``sizes``, in turn) and Adagrad's update of the flat parameters, nothing else -- what the
    command a user types is measured against."""
    data, net = digits_mlp()
    flat = net.init_params(0)
    grad, state = np.empty_like(flat), np.full_like(flat, 0.1)
    a, b = np.empty_like(flat), np.empty_like(flat)
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    for k in range(gradients):
        rows = rng.integers(0, data.n_train, sizes[k % len(sizes)])
        numpy_gradient(flat, grad, data.X_train[rows], data.y_train[rows])
        adagrad(flat, grad, state, a, b, lr, eps)
    return time.perf_counter() - began


def user_command(replicas: int, steps: int, shards: int, profile: str, n: int, report: str) -> float:
    """Seconds for ``dbkit simulate downpour`` as a user types it (a process of its own, its report
    written): ``replicas`` replicas of the digits MLP, ``replicas * steps`` steps, a machine for each
    replica and shard, Adagrad, one BLAS thread."""
    import os
    import subprocess
    import sys

    args = [sys.executable, "-m", "dbkit", "simulate", "downpour", "--dataset", "digits", "--model", "mlp",
            "--replicas", str(replicas), "--shards", str(shards), "--machines", str(replicas + shards),
            "--steps", str(replicas * steps), "--optimizer", "adagrad", "--n-fetch", str(n), "--n-push", str(n),
            "--profile", profile, "--eval-every", str(max(1, replicas * steps // 10)), "--report", report,
            "--quiet"]
    began = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                                       "OPENBLAS_NUM_THREADS": "1"})
    took = time.perf_counter() - began
    if done.returncode not in (0, 3):  # (3: diverged, still a whole run)
        raise RuntimeError(f"dbkit simulate failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return took


def user_fit(replicas: int, steps: int, shards: int, profile: str, n: int) -> float:
    """Seconds for the same run through the Python API: a ``DownpourSGD`` on ``dbkit.sim.Cluster``, its
    ``fit`` and its ``report()``."""
    import dbkit
    from dbkit.sim import Cluster

    began = time.perf_counter()
    job = dbkit.DownpourSGD("mlp", "digits", cluster=Cluster(profile, replicas + shards), replicas=replicas,
                            shards=shards, optimizer="adagrad", lr=0.05, n_fetch=n, n_push=n,
                            eval_every=max(1, replicas * steps // 10))
    try:
        job.fit(steps=replicas * steps, progress=False)
        job.report()
    finally:
        job.stop()
    return time.perf_counter() - began


def plain_loop(gradients: int, sizes: list[int]) -> float:
    """Seconds for ``gradients`` mini-batch gradients of the digits MLP (of ``sizes``, in turn) in a bare
    numpy loop."""
    data, net = digits_mlp()
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
    data, net = digits_mlp()
    params = net.init_params(0)
    state = np.full_like(params, 0.1)
    a, b = np.empty_like(params), np.empty_like(params)
    rng = np.random.default_rng(0)
    began = time.perf_counter()
    for k in range(gradients):
        rows = rng.integers(0, data.n_train, sizes[k % len(sizes)])
        _, grad = net.loss_and_grad(params, data.X_train[rows], data.y_train[rows])
        np.isfinite(np.dot(grad, grad))
        adagrad(params, grad, state, a, b, lr, eps)
    return time.perf_counter() - began


def bare_replicas(replicas: int, steps: int, n: int = 1, batch: int = 32, lr: float = 0.05,
                  eps: float = 1e-8) -> tuple[float, np.ndarray]:
    """Seconds for ``replicas`` Downpour replicas of the digits MLP, each with its own state, taking turns
    on one Adagrad shard in a bare numpy loop with no classes: every replica keeps its own parameters (a
    copy of the shard's at each fetch), its own accrued gradient and its own data shard, drawn as
    ``MiniBatches`` draws it (a fresh permutation each epoch); every ``n`` steps it pushes the accrued
    gradient (checked finite, Adagrad applied) and fetches. The same work per step as the simulated
    replicas', with nothing but the arithmetic and the per-replica state: the ceiling for a simulator
    that computes 200 replicas' numerics, where ``bare_downpour`` is one replica's. Returns the seconds and
    the shard's parameters at the end, which equal ``same_classes``' bit for bit (the same work, checked
    in ``tests/test_benchmarks.py``)."""
    from dbkit.data import shard_indices

    data, net = digits_mlp()
    shard = net.init_params(0)
    state = np.full_like(shard, 0.1)
    a, b = np.empty_like(shard), np.empty_like(shard)
    rows = shard_indices(data.n_train, replicas, seed=0)
    X = [data.X_train[r] for r in rows]
    y = [data.y_train[r] for r in rows]
    sizes = [min(batch, len(r)) for r in rows]
    rngs = [np.random.default_rng(i) for i in range(replicas)]
    orders = [rng.permutation(len(r)) for rng, r in zip(rngs, rows)]
    at = [0] * replicas
    params = [np.empty_like(shard) for _ in range(replicas)]  # each fetched at the replica's first step
    accrued = [np.zeros_like(shard) for _ in range(replicas)]
    began = time.perf_counter()
    for step in range(steps):
        for i in range(replicas):
            if step == 0:
                np.copyto(params[i], shard)
            if at[i] + sizes[i] > len(orders[i]):
                orders[i], at[i] = rngs[i].permutation(len(y[i])), 0
            idx = orders[i][at[i]: at[i] + sizes[i]]
            at[i] += sizes[i]
            _, grad = net.loss_and_grad(params[i], X[i][idx], y[i][idx])
            np.isfinite(np.dot(grad, grad))
            if step % n == 0:
                np.copyto(accrued[i], grad)
            else:
                accrued[i] += grad
            if (step + 1) % n:  # the local step between fetches (Sec. 4.1)
                grad *= np.float32(lr)
                params[i] -= grad
            else:  # push (checked finite, one dot, as the shard checks it) and fetch
                np.isfinite(np.dot(accrued[i], accrued[i]))
                adagrad(shard, accrued[i], state, a, b, lr, eps)
                np.copyto(params[i], shard)
    return time.perf_counter() - began, shard


def direct_replicas(replicas: int, steps: int, batch: int = 32) -> tuple[float, np.ndarray]:
    """Seconds for ``replicas`` minimal replica loops (n = 1) calling dbkit's ``ParameterShard`` (Adagrad,
    its checks and counters included) directly: each draws its batch from ``MiniBatches``, computes its
    gradient with the finiteness check, copies it into its accrued buffer and calls ``push_fetch``. Between
    the ceiling and ``same_classes``: what the shard's own work adds to the bare loop, and (against the
    classes) what the replica's parts do (schedule, exchange, client, pending calls, counters). Returns the
    seconds and the shard's parameters, equal to the classes' bit for bit."""
    from dbkit.data import MiniBatches, shard_indices
    from dbkit.ps import ParameterShard

    data, net = digits_mlp()
    shard = ParameterShard(0, 0, net.size, net.init_params(0), "adagrad", 0.05)
    rows = shard_indices(data.n_train, replicas, seed=0)
    batches = [MiniBatches(data.X_train[r], data.y_train[r], batch, seed=i) for i, r in enumerate(rows)]
    params: list[np.ndarray | None] = [None] * replicas
    versions = [0] * replicas
    accrued = [np.zeros(net.size, dtype=np.float32) for _ in range(replicas)]
    began = time.perf_counter()
    for _ in range(steps):
        for i in range(replicas):
            if params[i] is None:
                versions[i], params[i] = shard.fetch()
            X, y = next(batches[i])
            with np.errstate(all="ignore"):
                loss, grad = net.loss_and_grad(params[i], X, y)
                np.isfinite(loss) and np.isfinite(np.dot(grad, grad))
            np.copyto(accrued[i], grad)
            _, versions[i], params[i] = shard.push_fetch(accrued[i], versions[i], str(i), len(y), versions[i])
    return time.perf_counter() - began, shard.params.copy()


def same_classes(replicas: int, steps: int, shards: int, n: int = 1, batch: int = 32) -> tuple[float, np.ndarray]:
    """Seconds for the simulated run's numerics with no clock: ``replicas`` ``DownpourReplica`` s of the
    digits MLP taking turns, each step by step, on in-process shards (Adagrad) -- the floor a simulator
    that runs dbkit's own classes cannot go below. Returns the seconds and the parameters at the end."""
    from dbkit.downpour import DownpourReplica
    from dbkit.data import shard_indices
    from dbkit.ps import ShardedParameters, balanced_layout, ParameterShard

    data, net = digits_mlp()
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
    return time.perf_counter() - began, np.concatenate([s.params for s in ps])


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
    p.add_argument("--steps", type=int, default=250, help="steps per replica (default: %(default)s, 50,000 in all)")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--n", type=int, default=1, help="n_fetch = n_push (default: %(default)s)")
    p.add_argument("--profile", default="here")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="measure everything N times, in turn, and give each ratio as the median of its N "
                        "rounds' (this machine's speed drifts between minutes; default: %(default)s)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be at least 1, got {args.repeat}")
    from threadpoolctl import threadpool_limits

    from dbkit.sim.figures import figure3

    import tempfile

    gradients = args.replicas * args.steps
    sizes = batch_sizes(args.replicas)
    rounds: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="dbkit-sim-speed-") as folder, threadpool_limits(1):
        report_path = str(Path(folder) / "report.json")  # the command's report, removed at the end
        for k in range(args.repeat):
            r = {"numpy": numpy_loop(gradients, sizes),
                 "user_command": user_command(args.replicas, args.steps, args.shards, args.profile, args.n,
                                              report_path),
                 "user_fit": user_fit(args.replicas, args.steps, args.shards, args.profile, args.n),
                 "plain": plain_loop(gradients, sizes), "bare_adagrad": bare_downpour(gradients, sizes),
                 "bare_replicas": bare_replicas(args.replicas, args.steps, args.n)[0],
                 **({"direct_replicas": direct_replicas(args.replicas, args.steps)[0]} if args.n == 1 else {}),
                 "same_classes": same_classes(args.replicas, args.steps, args.shards, args.n)[0]}
            r["simulated"], report = simulated(args.replicas, args.steps, args.shards, args.profile, args.n)
            rounds.append(r)
            if args.repeat > 1:
                print(f"round {k + 1}/{args.repeat}: " + ", ".join(f"{name} {t:.1f} s" for name, t in r.items()),
                      flush=True)
        began = time.perf_counter()
        figure3()
        fig3_seconds = time.perf_counter() - began

    def ratio(a: str, b: str = "plain") -> float:  # the median over the rounds of a / b in one round
        return float(np.median([r[a] / r[b] for r in rounds]))

    def seconds(a: str) -> float:
        return float(np.median([r[a] for r in rounds]))

    print(f"the command a user types, dbkit simulate downpour with its report ({args.replicas} replicas, "
          f"{args.shards} shards, n={args.n}, {args.profile}, {gradients:,} steps): {seconds('user_command'):.1f} s "
          f"= {ratio('user_command', 'numpy'):.2f}x a plain numpy loop of the same gradients and Adagrad updates "
          f"at the replicas' batch sizes ({seconds('numpy'):.1f} s, no dbkit class); the API's fit on "
          f"dbkit.sim.Cluster with its report {seconds('user_fit'):.1f} s = {ratio('user_fit', 'numpy'):.2f}x")
    print(f"{gradients:,} gradients of the digits MLP (batches of {min(sizes)} to {max(sizes)}), "
          f"{'median of ' + str(args.repeat) + ' rounds' if args.repeat > 1 else 'one round'}: plain numpy loop "
          f"{seconds('plain'):.1f} s; with Adagrad's update in the same bare loop {seconds('bare_adagrad'):.1f} s = "
          f"{ratio('bare_adagrad'):.2f}x; {args.replicas} replicas each with its own state in a bare loop (the "
          f"ceiling) {seconds('bare_replicas'):.1f} s = {ratio('bare_replicas'):.2f}x; "
          + (f"minimal replica loops calling the shard directly {seconds('direct_replicas'):.1f} s = "
             f"{ratio('direct_replicas'):.2f}x; " if args.n == 1 else "")
          + f"the same classes with no "
          f"clock {seconds('same_classes'):.1f} s = {ratio('same_classes'):.2f}x; simulated ({args.replicas} "
          f"replicas, {args.shards} shards, n={args.n}, {args.profile}) {seconds('simulated'):.1f} s = "
          f"{ratio('simulated'):.2f}x the loop, {ratio('simulated', 'bare_replicas'):.2f}x the ceiling, "
          f"{ratio('simulated', 'same_classes'):.2f}x the classes alone; {report['simulation']['events']:,} events; "
          f"{report['simulation']['stacked_gradients']:,} gradients computed in stacks")
    print(f"cost-only Fig. 3 sweep: {fig3_seconds:.3f} s")
    write_json(args.json, "sim_speed", {"replicas": args.replicas, "steps": args.steps, "shards": args.shards,
                                        "n": args.n, "repeat": args.repeat,
                                        "batch_sizes": sorted(set(sizes)), "rounds": rounds,
                                        **{f"{name}_seconds": seconds(name) for name in rounds[0]},
                                        "ratio": ratio("simulated"),
                                        "user_command_ratio": ratio("user_command", "numpy"),
                                        "user_fit_ratio": ratio("user_fit", "numpy"),
                                        "of_ceiling": 1 / ratio("simulated", "bare_replicas"),
                                        "overhead": ratio("simulated", "same_classes") - 1,
                                        "events": report["simulation"]["events"],
                                        "stacked_gradients": report["simulation"]["stacked_gradients"],
                                        "fig3_seconds": fig3_seconds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
