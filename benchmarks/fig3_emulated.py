"""Fig. 3, measured on an emulated cluster (issue #47): one replica split over 1 to 8 hosts of their own.

    python benchmarks/fig3_emulated.py [--hosts 8] [--links 1gbit,100mbit] [--cpu 0.25] [--ks 1,2,4,8]
        [--steps 10] [--json F]
    python benchmarks/fig3_emulated.py --predict F    # a run saved with --json F, predicted again (no root)

For each link rate an emulated cluster is built with ``dbkit.emulate.Cluster`` (``hosts`` network namespaces,
each link shaped both ways, each host under a CPU quota; a real ``dask scheduler`` and a ``dask worker`` per
host). Three models (``models()``: the two of ``partition_speedup.py``, a locally connected one and a fully
connected one of similar size, and dbkit's speech preset, the paper's dense Fig. 3 model at dbkit's scale) are
split into K partitions on K distinct hosts, and one training step of a batch of 32 is timed with
``dbkit.calibration.time_partitioned_step``, the same path a partitioned Downpour replica takes (partition 0
leads each step over the partition wire), interleaved with the same network in 1 partition on host 1. The
measured speed-up (K = 1 step over K step, the quantity of the paper's Fig. 3) stands beside:

- the simulator's prediction for the same models on the same cluster (``partitioned_step`` on
  ``emulated_profile`` with ``HostProbes``: the links' rate, 50 us, and what a partition's worker on a host
  does, measured there by ``dbkit.calibration.host_probes``: a dense and a local probe network's gradients,
  the same with an eighth of their first layer, which make a partition's rate depend on its working set, a
  step's own work in one partition, one boundary message's hop, and what a boundary byte costs beyond the
  link, a message and an exchange under load (the bulk and thin probes, fitted together), and an array of
  32 MiB or more made anew each step; the links' token bucket), the same without the last three ("sixth
  pass"), the same without the small probes and the step's own work either ("one rate" per kind of
  arithmetic, as the fifth pass did), and
  the same prediction from the speech probe alone (the base
  profile's arithmetic rates and its Dask actor call as the boundary message: what the earlier passes did), and
- the paper's shape: the fully connected model gains little and peaks early (the speech model: 2.2x at 8
  machines, less beyond), the locally connected one keeps gaining (Sec. 5, Fig. 3).

A host's BLAS runs one thread (``ClusterSpec.blas_threads``); before it did, OpenBLAS's second thread spun
on the host's quota and the dense model's partitions computed up to 10x slower than their share, which made
it look as if it peaked at K = 2 (2026-11-29 and -30 runs in docs/benchmarks.md).

Needs root (``dbkit emulate``'s requirements); elsewhere it says what is missing and exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from common import write_json
from partition_speedup import models as loopback_models

#: what the seventh pass of issue #47 measures (the exchange's costs, arrays made anew); without it and without
#: the links' token bucket, the sixth pass's prediction
SEVENTH_PASS = dict(bulk_exchange_seconds=None, thin_exchange_seconds=None, thin4_exchange_seconds=None,
                    fresh_seconds_per_byte=None)
PAPER = "dense peaks early (speech: 2.2x at 8 machines); locally connected keeps gaining (image-1.7b: >12x at 81)"


def models() -> dict:
    """``partition_speedup``'s two models, and dbkit's speech preset: the paper's Fig. 3 dense model (a
    fully connected speech network), at dbkit's scale. Its hidden layers each need all of the layer before
    them, where the ``dense`` model's first layer (most of its arithmetic) reads only the data."""
    from dbkit import nn

    return {**loopback_models(), "speech": nn.build("speech", 440, 64)}


def simulated_steps(profile, net, ks: list[int], batch: int) -> list:  # noqa: ANN001 - a simulator profile
    """The simulator's step (``StepCost``) of ``net`` at each K on ``profile``'s machines, cut into bands of rows
    as dbkit's partitioner cuts it; a forward and backward pass, without the update after it, as measured."""
    from dbkit.runtime.sim.partitioned_step import partitioned_step
    from dbkit.runtime.sim.shape import ModelShape

    shape = ModelShape.of(net)
    return [partitioned_step(profile, shape, k, batch, bands=True, update=False) for k in [1, *ks]]


def predicted(profile, net, ks: list[int], batch: int) -> list[float]:  # noqa: ANN001 - a simulator profile
    """The simulator's speed-up of ``net`` at each K (``simulated_steps``' K = 1 step over its K step)."""
    one, *steps = simulated_steps(profile, net, ks, batch)
    return [one.seconds / s.seconds for s in steps]


def profiles(hosts: int, link: str, cpu: float, grad: float, probes) -> dict:  # noqa: ANN001 - HostProbes
    """The emulated profile from ``probes`` and the earlier passes' (``predict``'s columns)."""
    from dbkit.emulate import ClusterSpec
    from dbkit.emulate.profile import emulated_profile

    spec = ClusterSpec(hosts=hosts, link=link, cpu=cpu)
    no_bucket = {"burst_bytes": 0}  # the earlier passes' links: every byte at the rate
    earlier = replace(probes, **SEVENTH_PASS)
    return {"simulated": emulated_profile(spec, grad, probes=probes),
            "sixth_pass": emulated_profile(spec, grad, probes=earlier).but(machine=no_bucket),
            "one_rate": emulated_profile(spec, grad, probes=replace(
                earlier, dense_small_seconds=None, local_small_seconds=None, step_rest_seconds=None,
                dense_rest_seconds=None)).but(machine=no_bucket),
            "speech_probe_only": emulated_profile(spec, grad).but(machine=no_bucket)}


def predict(run: dict, batch: int) -> dict:
    """``run`` (``measure_link``'s) with the simulator's columns worked out again from its own measurements
    (its host probes and speech gradient), by the simulator as it is now."""
    from dbkit.emulate.profile import HostProbes

    probes = HostProbes(**run["host_probes"])
    made = profiles(run["hosts"], run["link"], run["cpu"], run["gradient_seconds"], probes)
    run["profile"] = made["simulated"].name
    for name, net in models().items():
        rows = run["models"][name]["rows"]
        ks = [r["k"] for r in rows]
        for column, profile in made.items():
            for row, speedup in zip(rows, predicted(profile, net, ks, batch)):
                row[f"simulated_{column}" if column != "simulated" else "simulated_speedup"] = speedup
        for row, step in zip(rows, simulated_steps(made["simulated"], net, ks, batch)[1:]):
            row["simulated_compute_ms"], row["simulated_exchange_ms"] = step.compute * 1e3, step.exchange * 1e3
            row["error"] = row["simulated_speedup"] / row["speedup"] - 1
    return run


def measure_link(hosts: int, link: str, cpu: float, ks: list[int], steps: int, batch: int) -> dict:
    """Build the cluster for ``link``, measure each model at each K and predict the same; returns the rows."""
    from dbkit.calibration import time_partitioned_step
    from dbkit.calibration.host_probes import measure as measure_host_probes
    from dbkit.emulate import Cluster
    from dbkit.emulate.profile import gradient_seconds
    from dbkit.runtime.dask import Cluster as DaskCluster

    out: dict = {"link": link, "hosts": hosts, "cpu": cpu, "models": {}}
    with Cluster(hosts=hosts, link=link, cpu=cpu) as emulated:
        grad = gradient_seconds(1)
        with DaskCluster(scheduler=emulated.address) as dask_cluster:
            probes = measure_host_probes(dask_cluster)
            profile = profiles(hosts, link, cpu, grad, probes)["simulated"]
            out.update(gradient_seconds=grad, host_probes=asdict(probes))
            print(f"  {link}: host probes: dense {probes.dense_seconds * 1e3:.1f} ms, local "
                  f"{probes.local_seconds * 1e3:.1f} ms, a hop {probes.hop_seconds * 1e3:.2f} ms; small probes: "
                  f"dense {probes.dense_small_seconds * 1e3:.2f} ms, local {probes.local_small_seconds * 1e3:.2f} ms "
                  f"(working-set exponents {profile.compute.dense_working_set_exponent:.2f} dense, "
                  f"{profile.compute.local_working_set_exponent:.2f} local); a step in one partition beyond its "
                  f"arithmetic: 8-8-2 {probes.step_rest_seconds * 1e3:.2f} ms, dense probe "
                  f"{probes.dense_rest_seconds * 1e3:.2f} ms; exchanges: bulk {probes.bulk_exchange_seconds * 1e3:.1f} "
                  f"ms, thin {probes.thin_exchange_seconds * 1e3:.2f} ms, thin in 4 "
                  f"{(probes.thin4_exchange_seconds or 0) * 1e3:.2f} ms (fitted, at a speed of 1: "
                  f"{profile.message.partition_exchange_seconds * 1e6:.1f} us an exchange, "
                  f"{profile.message.partition_message_seconds * 1e6:.1f} us a message, "
                  f"{profile.message.partition_seconds_per_byte * 1e9:.2f} ns a byte); an array made anew "
                  f"{(probes.fresh_seconds_per_byte or 0) * 1e9:.3f} ns a byte",
                  file=sys.stderr, flush=True)
            for name, net in models().items():
                rows = []
                for k in ks:
                    began = time.perf_counter()
                    s = time_partitioned_step(dask_cluster, net, k, steps, batch, whole=False)
                    rows.append({"k": k, "step_ms": s.step_ms, "k1_ms": s.k1_ms, "speedup": s.speedup,
                                 "compute_ms": s.compute_ms, "rest_ms": s.rest_ms,
                                 "bytes_per_step": s.bytes_per_step, "seconds": time.perf_counter() - began})
                    print(f"  {link} {name} K={k}: {s.step_ms:.1f} ms/step, K=1 {s.k1_ms:.1f} ms, "
                          f"{s.speedup:.2f}x", file=sys.stderr, flush=True)
                out["models"][name] = {"parameters": net.size, "rows": rows}
    return predict(out, batch)


def within(runs: list[dict], tolerance: float = 0.2) -> tuple[int, int, float]:
    """How many of the runs' points with K > 1 the simulator predicts within ``tolerance``, of how many, and
    the median error."""
    import statistics

    errors = [abs(r["error"]) for run in runs for m in run["models"].values() for r in m["rows"] if r["k"] > 1]
    return sum(e <= tolerance for e in errors), len(errors), statistics.median(errors) if errors else 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--links", default="1gbit,100mbit", help="comma-separated link rates, one cluster each")
    p.add_argument("--cpu", type=float, default=0.25)
    p.add_argument("--ks", default="1,2,4,8")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--predict", default=None, metavar="PATH",
                   help="measure nothing: predict a run saved with --json again, with the simulator as it is now")
    args = p.parse_args(argv)
    if args.predict:
        import json

        try:
            saved = json.loads(Path(args.predict).read_text())
            runs = [predict(run, args.batch) for run in saved["runs"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"fig3_emulated: --predict {args.predict}: not a run saved with --json ({e})", file=sys.stderr)
            return 2
        return report(runs, args.json)
    from dbkit.emulate import missing

    why = missing()
    if why:
        print(f"fig3_emulated: {why}", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.ks.split(",")]
    if max(ks) > args.hosts or min(ks) < 1:
        print(f"fig3_emulated: every K must be in [1, {args.hosts}] (--hosts), got {ks}", file=sys.stderr)
        return 2
    runs = [measure_link(args.hosts, link, args.cpu, ks, args.steps, args.batch) for link in args.links.split(",")]
    return report(runs, args.json)


def report(runs: list[dict], json_path: str | None) -> int:
    """Print ``runs`` side by side with the simulator's predictions and the paper's shape; save them."""
    for run in runs:
        hp = run["host_probes"]
        print(f"\n{run['hosts']} emulated hosts, {run['link']} links, {run['cpu']} core each "
              f"(on a host, a speech gradient: {run['gradient_seconds'] * 1e3:.1f} ms; in a host's worker, the "
              f"dense probe's {hp['dense_seconds'] * 1e3:.1f} ms, the local probe's {hp['local_seconds'] * 1e3:.1f} "
              f"ms, a boundary hop {hp['hop_seconds'] * 1e3:.2f} ms; profile {run['profile']}, simulated)")
        print(f"{'model':>6} {'K':>3} {'ms/step':>8} {'arith ms':>8} {'K=1 ms':>7} {'sim arith':>9} "
              f"{'sim exch':>8} {'measured':>9} {'simulated':>10} {'error':>6} {'sixth pass':>11} "
              f"{'sim, one rate':>14} "
              f"{'sim, speech probe only':>23} {'bytes/step':>11}")
        for name, m in run["models"].items():
            for r in m["rows"]:
                print(f"{name:>6} {r['k']:>3} {r['step_ms']:>8.1f} {r['compute_ms']:>8.1f} {r['k1_ms']:>7.1f} "
                      f"{r['simulated_compute_ms']:>9.1f} {r['simulated_exchange_ms']:>8.1f} "
                      f"{r['speedup']:>8.2f}x {r['simulated_speedup']:>9.2f}x {r['error']:>+6.0%} "
                      f"{r['simulated_sixth_pass']:>10.2f}x {r['simulated_one_rate']:>13.2f}x "
                      f"{r['simulated_speech_probe_only']:>22.2f}x {r['bytes_per_step']:>11,.0f}")
            best = max(m["rows"], key=lambda r: r["speedup"])
            print(f"{name:>6}   measured peak {best['speedup']:.2f}x at K={best['k']}")
    hit, points, median = within(runs)
    print(f"\nsimulated within 20% of measured: {hit} of {points} points with K > 1 (median error {median:.0%})")
    print(f"paper (Fig. 3): {PAPER}")
    write_json(json_path, "fig3_emulated", {"runs": runs, "paper": PAPER})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
