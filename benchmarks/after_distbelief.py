"""Downpour with Adagrad against its descendants, with one replica slowed 4x: time to a target accuracy.

    python benchmarks/after_distbelief.py [--seconds 20] [--rounds 3] [--replicas 3] [--slow 4]
                                          [--target 0.5] [--eval-every 20] [--json out.json]

Every method trains the same model (the digits MLP) on the same data, with the same replicas, shards and
time budget, on one 2-worker LocalCluster, one after the other; replica 0 is slowed ``--slow`` times
(a straggler, as in the paper's Sec. 4.1). In each round the methods run in a new order, and a method's
figure is its median over the rounds. Each method's learning rates are fixed here, chosen once on this
machine (not tuned per run): a comparison of the ideas at sensible settings, not of their best.

- ``downpour-adagrad``: the paper's Downpour SGD with Adagrad on the shards (Sec. 4.1);
- ``staleness-aware``: Downpour with the step divided by the push's staleness (Zhang et al. 2016);
- ``diloco``: 8 inner AdamW steps, the delta pushed, Nesterov momentum on the shards (Douillard et al. 2023);
- ``easgd``: local SGD and an elastic exchange every 4 steps (Zhang et al. 2015);
- ``ssp``: Downpour with Adagrad where no replica runs more than 3 steps ahead of the slowest (Ho et al. 2013);
- ``backup-sync``: synchronous SGD whose rounds take the first N - 1 gradients (Chen et al. 2016).

Reported per method: seconds to the target (None if never reached within the budget), final test
accuracy, updates applied by a shard, bytes pushed per example, mean staleness of the pushes.
"""

from __future__ import annotations

import argparse
import statistics

from common import write_json

import dbkit

METHODS = {
    "downpour-adagrad": dict(optimizer="adagrad", lr=0.05),
    "staleness-aware": dict(optimizer="staleness-aware", lr=0.2),
    "diloco": dict(optimizer="nesterov", replica="diloco", lr=0.003, outer_lr=0.35, inner_steps=8),
    "easgd": dict(optimizer="sgd", replica="easgd", lr=0.1, alpha=0.1, tau=4),
    "ssp": dict(optimizer="adagrad", replica="ssp", lr=0.05, max_staleness=3),
    "backup-sync": dict(optimizer="sgd", replica="backup-sync", lr=0.1, backups=1),
}


def one_run(name: str, client, args: argparse.Namespace) -> dict:
    """One method's run on ``client``'s cluster; its figures."""
    settings = dict(METHODS[name], replicas=args.replicas, shards=2, seconds=args.seconds,
                    target_accuracy=args.target, slow_replicas={0: float(args.slow)}, eval_every=args.eval_every,
                    seed=0)
    with dbkit.DownpourSGD(args.model, args.dataset, client=client, **settings) as job:
        job.fit(progress=False)
    report = job.report()
    reached = next(t for t in report["time_to_accuracy"] if t["target"] == args.target)
    shards = report["shards"]
    examples = max(1, report["examples"])
    staleness = [(s["staleness"]["mean"] or 0.0, s["staleness"]["count"]) for s in shards]
    pushes = sum(c for _, c in staleness)
    return {"seconds_to_target": reached["seconds"], "final_accuracy": report["final"]["test_accuracy"],
            "updates_per_shard": sum(s["updates"] for s in shards) / len(shards),
            "bytes_pushed_per_example": sum(s["bytes_pushed"] for s in shards) / examples,
            "mean_staleness": sum(m * c for m, c in staleness) / max(1, pushes), "examples": report["examples"]}


def median_or_none(values: list) -> float | None:
    """The median of the values that are numbers; None if fewer than half are (the target not reached)."""
    numbers = [v for v in values if v is not None]
    return statistics.median(numbers) if len(numbers) * 2 > len(values) else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="each run's budget")
    p.add_argument("--model", default="mlp")
    p.add_argument("--dataset", default="signals")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--slow", type=float, default=4.0, help="replica 0 is this many times slower")
    p.add_argument("--target", type=float, default=0.5, help="the test accuracy to reach")
    p.add_argument("--eval-every", type=int, default=20, help="steps between evaluations (the time's resolution)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of " + ", ".join(METHODS))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    names = args.methods.split(",")
    unknown = sorted(set(names) - set(METHODS))
    if unknown:
        p.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    rounds: list[dict[str, dict]] = []
    with dbkit.Cluster(n_workers=2) as cluster:
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            rounds.append({name: one_run(name, cluster.client, args) for name in order})
            print(f"round {r + 1}: " + ", ".join(f"{n} {rounds[-1][n]['seconds_to_target']}" for n in names),
                  flush=True)
    out = {"settings": {"seconds": args.seconds, "replicas": args.replicas, "slow": args.slow,
                        "target": args.target, "eval_every": args.eval_every, "model": args.model,
                        "dataset": args.dataset, "methods": {n: METHODS[n] for n in names}},
           "rounds": rounds,
           "median": {n: {"seconds_to_target": median_or_none([rd[n]["seconds_to_target"] for rd in rounds]),
                          **{k: statistics.median(rd[n][k] for rd in rounds)
                             for k in ("final_accuracy", "updates_per_shard", "bytes_pushed_per_example",
                                       "mean_staleness")}}
                      for n in names}}
    for n in names:
        m = out["median"][n]
        print(f"{n:18s} to {args.target:.0%}: {m['seconds_to_target']} s, final {m['final_accuracy']:.3f}, "
              f"staleness {m['mean_staleness']:.2f}, {m['bytes_pushed_per_example']:.0f} B pushed per example")
    write_json(args.json, "after_distbelief", out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
