"""What the ``dbkit`` command prints after a run: a few lines read off the report."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from ..runtime.sim.busy import Busy
from ..sim.seeds import Spread

ROWS = 24
"""Replicas or shards beyond this many are summarised in a line (with the ones not ``stopped`` still named)."""


def print_summary(report: dict, log: Callable[[str], None] = print, rows: bool = True) -> None:
    """A few lines read off ``report``; with ``rows``, a line per replica and per shard (or, beyond
    :data:`ROWS` of them, a line for them all and one for each replica that did not stop cleanly)."""
    f = report["final"]
    lost = [r for r in report.get("replicas", []) if r.get("state") == "lost"]
    if lost:  # first, where it cannot be missed
        log(f"{len(lost)} of {len(report['replicas'])} replicas were lost: "
            f"{', '.join(str(r['replica']) for r in lost[:8])}{' ...' if len(lost) > 8 else ''} (see the report)")
    if report.get("simulated"):
        s = report["simulation"]
        log(f"simulated on profile {report['profile']}: {report['wall_seconds']:.4g} virtual seconds, computed in "
            f"{s['real_seconds']:.1f}s; every time below is virtual")
        if "busy" in s:
            log(Busy(**{k: v for k, v in s["busy"].items() if k != "saturated"}).describe())
    log(f"{report['algorithm']}: {report['state']}, {report['steps']} steps, {report['examples_per_second']:.0f} "
        f"examples/s, {report['wall_seconds']:.1f}s {'virtual' if report.get('simulated') else 'wall'}")
    seeds = report.get("seeds")
    if seeds and seeds["spread"]:
        s = seeds["spread"]
        log(f"over {seeds['count']} seeds, computation times jittered (the figures above: seed "
            f"{report['config']['seed']}): examples/s " + Spread(**s["examples_per_second"]).describe()
            + (", test accuracy " + Spread(**s["test_accuracy"]).describe(4) if "test_accuracy" in s else "")
            + ", virtual seconds " + Spread(**s["virtual_seconds"]).describe(3))
    batch = report.get("batch")
    if batch and batch["shrunk"]:
        sizes = f"{batch['smallest']}" + (f"-{batch['largest']}" if batch["largest"] != batch["smallest"] else "")
        log(f"batch: {sizes} examples a step, not the {batch['asked']} asked: each of the {len(report['replicas'])} "
            f"replicas holds about {batch['examples_per_replica']} training examples (its data shard); fewer "
            "replicas or a larger dataset give the batch asked")
    if report.get("cost_only"):
        log(f"cost-only: the time and bytes of {report['model']['name']} ({report['model']['parameters']:,} "
            "parameters), no numerics, so no losses or accuracies")
    else:
        log(f"final: test accuracy {f['test_accuracy']:.4f}, test loss {f['test_loss']:.4f}, "
            f"full-batch training loss {f['full_batch_loss']:.4f}")
    target = report["config"].get("target_accuracy")
    reached = [t for t in report.get("time_to_accuracy", []) if t["seconds"] is not None]
    if target is not None:
        hit = next((t for t in report["time_to_accuracy"] if t["target"] == target), None)
        log(f"time to {target:.0%} test accuracy: " + (f"{hit['seconds']:.1f}s (step {hit['step']})"
                                                       if hit and hit["seconds"] is not None else "not reached"))
    elif reached:
        best = reached[-1]
        log(f"time to {best['target']:.0%} test accuracy: {best['seconds']:.1f}s (step {best['step']})")
    divergence = [e for e in report.get("events", []) if e["type"] == "Divergence"]
    if divergence:
        log(f"diverged: {divergence[-1]['message']}")
    b = report["bytes"]
    if b["fetched"] or b["pushed"]:
        log(f"parameter server: {b['fetched'] / 1e6:.1f} MB fetched, {b['pushed'] / 1e6:.1f} MB pushed")
    if b["between_partitions"]:
        log(f"between partitions: {b['between_partitions'] / 1e6:.2f} MB sent "
            f"(the connectivity requires {b['between_partitions_min'] / 1e6:.2f} MB)")
    if "sandblaster" in report:
        sb = report["sandblaster"]
        why = sb["stop_reason"] or "ended by its step or time budget"  # no L-BFGS stopping rule held
        log(f"L-BFGS: {sb['iterations']} iterations, {sb['batch_evaluations']} batch gradients ({why}); "
            f"units per replica {sb['units_per_replica']}, backups {sb['backups_issued']} issued / "
            f"{sb['backups_won']} won")
    if not rows:
        return
    replicas = report["replicas"] if report["algorithm"] != "sgd" else []
    if len(replicas) > ROWS:
        log(f"  {len(replicas)} replicas: " + ", ".join(f"{_spread([r[k] for r in replicas])} {k}"
                                                      for k in ("steps", "pushes", "fetches")))
        replicas = [r for r in replicas if r.get("error")]
    for r in replicas[:ROWS]:
        state = f" ({r['state']}: {r['error']})" if r.get("error") else ""
        log(f"  replica {r['replica']}: {r['steps']} steps, {r['pushes']} pushes, {r['fetches']} fetches{state}")
    if len(replicas) > ROWS:
        log(f"  ... and {len(replicas) - ROWS} more replicas that did not stop cleanly (the report lists them)")
    shards = report["shards"]
    if len(shards) > ROWS:
        means = [s["staleness"]["mean"] for s in shards]
        log(f"  {len(shards)} shards: {_spread([s['updates'] for s in shards])} updates, "
            f"{sum(s['rejected'] for s in shards)} refused, staleness mean {min(means):.2f} to {max(means):.2f} "
            f"(versions)")
        shards = []
    for s in shards:
        st, age = s["staleness"], s["staleness_examples"]
        log(f"  shard {s['index']} on {s['worker']}: {s['updates']} updates, {s['rejected']} refused, "
            f"staleness mean {st['mean']:.2f} p95 {st['p95']} max {st['max']} (versions), "
            f"mean {age['mean']:.0f} examples")


def _spread(values: list[int]) -> str:
    """``values`` as "min-median-max" (one number when they agree)."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{low}" if low == high else f"{low}-{mid:g}-{high} (min-median-max)"
