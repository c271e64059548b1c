"""A job on a simulated cluster, driven like a real one: how fast a slider move is applied and shown, how
often the panel refreshes, and how long 200 simulated replicas take, in real time, to the lesson's accuracy.

    python benchmarks/sim_job.py [--replicas 200] [--target 0.6] [--budget 150] [--moves 6] [--n 1] [--shards 8]
                                 [--model signal-local]
                                 [--json out.json]

The model and data are lesson 02's (``signal-local`` on ``signals``), on the ``distbelief-2012`` profile
with as many machines as replicas. Part one: a panel on a 20-replica job; the replicas and n_push sliders
are moved as a browser moves them (``set_state``), and the clock runs until the status line says each
change was applied. Part two: ``--replicas`` replicas (Adagrad, one replica's warm start first) with the
panel attached, fetching and pushing every ``--n`` steps to ``--shards`` shards, until the test accuracy
reaches ``--target`` or ``--budget`` real seconds pass; the panel's
frames per second and its longest gap between two frames throughout. Beside it, in the same run, the ceiling:
a plain numpy loop computing the same number of gradients of the same model and batch size (no replicas,
no shards, no clock). Every figure is real time on this machine; the run's own seconds are simulated, and
said so.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from common import write_json

PROFILE = "distbelief-2012"
SETTINGS = dict(shards=8, optimizer="adagrad", lr=0.01, n_fetch=1, n_push=1, eval_every=2000)


def _watch(panel, stop: threading.Event, gaps: dict[str, list[float]]) -> None:
    """Record the real seconds between the panel's refreshes (status line and controls) and between its
    frames (drawn when new figures came) until ``stop``."""
    last = {k: (getattr(panel, k), time.perf_counter()) for k in gaps}
    while not stop.is_set():
        time.sleep(0.01)
        for k, (count, t) in last.items():
            if getattr(panel, k) != count:
                now = time.perf_counter()
                gaps[k].append(now - t)
                last[k] = (getattr(panel, k), now)


def slider_latency(moves: int) -> dict:
    import dbkit
    from dbkit.sim import Cluster
    from dbkit.widgets import Panel

    job = dbkit.DownpourSGD("signal-local", "signals", cluster=Cluster(machines=200, profile=PROFILE),
                            replicas=20, **SETTINGS)
    panel = Panel(job)
    job.start()
    time.sleep(2.0)
    shown = []
    plan = [("replicas", 100), ("n_push", 10), ("replicas", 200), ("n_push", 100), ("replicas", 50), ("n_push", 1)]
    for setting, value in (plan * (moves // len(plan) + 1))[:moves]:
        t0 = time.perf_counter()
        panel.controls[setting].set_state({"value": value})
        text = f"{setting}={value} applied"
        while text not in panel.status.value:
            if time.perf_counter() - t0 > 30:
                raise SystemExit(f"the status line never showed {text!r}: {panel.status.value}")
            time.sleep(0.002)
        shown.append(time.perf_counter() - t0)
        time.sleep(0.5)
    job.stop()
    panel.close()
    return {"moves": len(shown), "shown_median": statistics.median(shown), "shown_max": max(shown), "shown": shown}


def to_target(replicas: int, target: float, budget: float, settings: dict, model: str = "signal-local") -> dict:
    import dbkit
    from dbkit.sim import Cluster
    from dbkit.widgets import Panel

    began = time.perf_counter()
    job = dbkit.DownpourSGD(model, "signals", cluster=Cluster(machines=max(replicas, 2), profile=PROFILE),
                            replicas=replicas, warm_start_steps=1000 if replicas > 1 else 0, **settings)
    panel = Panel(job)
    stop, gaps = threading.Event(), {"refreshes": [], "frames": []}
    watcher = threading.Thread(target=_watch, args=(panel, stop, gaps), daemon=True)
    watcher.start()
    job.start()
    reached = None
    while time.perf_counter() - began < budget:
        s = job.snapshot()
        if s.evaluation is not None and s.evaluation.test_accuracy >= target:
            reached = time.perf_counter() - began
            break
        time.sleep(0.05)
    s = job.snapshot()
    stop.set()
    watcher.join()
    job.stop()
    panel.close()
    real = time.perf_counter() - began
    return {"replicas": replicas, "reached_real_seconds": reached, "real_seconds": real, "steps": s.step,
            "simulated_seconds": s.t, "accuracy": s.evaluation.test_accuracy if s.evaluation else None,
            "refreshes_per_second": len(gaps["refreshes"]) / real,
            "longest_refresh_gap": max(gaps["refreshes"], default=None),
            "frames_per_second": len(gaps["frames"]) / real, "longest_frame_gap": max(gaps["frames"], default=None)}


def plain_gradients(steps: int, batch: int = 32, model: str = "signal-local") -> float:
    """Real seconds a plain numpy loop takes for ``steps`` gradients of the same model and batch size."""
    import numpy as np

    from dbkit.data import load
    from dbkit.nn import build

    data = load("signals")
    net = build(model, data.n_features, data.n_classes)
    params = net.init_params(0)
    rng = np.random.default_rng(0)
    sample = min(steps, 2000)
    t0 = time.perf_counter()
    for _ in range(sample):
        rows = rng.integers(0, data.n_train, batch)
        _, grad = net.loss_and_grad(params, data.X_train[rows], data.y_train[rows])
        params -= 0.01 * grad
    return (time.perf_counter() - t0) * steps / sample


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=200)
    p.add_argument("--target", type=float, default=0.6)
    p.add_argument("--budget", type=float, default=150.0, help="real seconds the run may take")
    p.add_argument("--moves", type=int, default=6)
    p.add_argument("--n", type=int, default=1, help="n_fetch = n_push of the run to the target")
    p.add_argument("--shards", type=int, default=8, help="shards of the run to the target")
    p.add_argument("--model", default="signal-local", help="the run's model (lesson 02's at-scale section: mlp)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    if args.replicas < 1 or args.moves < 1 or args.budget <= 0 or args.n < 1 or args.shards < 1:
        p.error("--replicas, --moves, --n and --shards must be at least 1, --budget positive")
    settings = dict(SETTINGS, n_fetch=args.n, n_push=args.n, shards=args.shards)
    latency = slider_latency(args.moves)
    print(f"slider to status line (real seconds): median {latency['shown_median']:.3f}, "
          f"max {latency['shown_max']:.3f} over {latency['moves']} moves")
    run = to_target(args.replicas, args.target, args.budget, settings, args.model)
    ceiling = plain_gradients(max(run["steps"], 1), model=args.model)
    run["plain_loop_seconds_same_steps"] = ceiling
    reached = run["reached_real_seconds"]
    print(f"{args.replicas} simulated replicas ({PROFILE}): "
          + (f"test accuracy {args.target} after {reached:.1f} s real" if reached is not None else
             f"not at {args.target} after {run['real_seconds']:.1f} s real (accuracy {run['accuracy']})")
          + f", {run['steps']:,} steps, {run['simulated_seconds']:.2f} simulated s; the panel refreshed "
          f"{run['refreshes_per_second']:.2f} times/s (longest gap {run['longest_refresh_gap']:.2f} s) and drew "
          f"{run['frames_per_second']:.2f} frames/s (longest gap {run['longest_frame_gap']:.2f} s); a plain numpy "
          f"loop of the same {run['steps']:,} gradients: {ceiling:.1f} s")
    write_json(args.json, "sim_job", {"profile": PROFILE, "model": args.model, "settings": settings,
                                      "target": args.target,
                                      "slider": latency, "run": run})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
