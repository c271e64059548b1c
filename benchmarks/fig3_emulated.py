"""Fig. 3, measured on an emulated cluster (issue #47): one replica split over 1 to 8 hosts of their own.

    python benchmarks/fig3_emulated.py [--hosts 8] [--links 1gbit,100mbit] [--cpu 0.25] [--ks 1,2,4,8]
        [--steps 10] [--json F]

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
  link: the bulk probe), the same without the bulk probe ("no byte cost", as the sixth pass did), the same
  without the small probes, the step's own work and the bulk probe ("one rate" per kind of arithmetic, as the
  fifth pass did), and
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

from common import write_json
from partition_speedup import models as loopback_models

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


def measure_link(hosts: int, link: str, cpu: float, ks: list[int], steps: int, batch: int) -> dict:
    """Build the cluster for ``link``, measure each model at each K and predict the same; returns the rows."""
    from dbkit.calibration import time_partitioned_step
    from dbkit.calibration.host_probes import measure as measure_host_probes
    from dbkit.emulate import Cluster, ClusterSpec
    from dbkit.emulate.profile import emulated_profile, gradient_seconds
    from dbkit.runtime.dask import Cluster as DaskCluster

    out: dict = {"link": link, "hosts": hosts, "cpu": cpu, "models": {}}
    with Cluster(hosts=hosts, link=link, cpu=cpu) as emulated:
        grad = gradient_seconds(1)
        with DaskCluster(scheduler=emulated.address) as dask_cluster:
            probes = measure_host_probes(dask_cluster)
            spec = ClusterSpec(hosts=hosts, link=link, cpu=cpu)
            profile, plain = emulated_profile(spec, grad, probes=probes), emulated_profile(spec, grad)
            one_rate = emulated_profile(spec, grad, probes=replace(probes, dense_small_seconds=None,
                                                                   local_small_seconds=None,
                                                                   step_rest_seconds=None, dense_rest_seconds=None,
                                                                   bulk_exchange_seconds=None))
            no_bytes = emulated_profile(spec, grad, probes=replace(probes, bulk_exchange_seconds=None))
            out.update(gradient_seconds=grad, host_probes=asdict(probes), profile=profile.name)
            print(f"  {link}: host probes: dense {probes.dense_seconds * 1e3:.1f} ms, local "
                  f"{probes.local_seconds * 1e3:.1f} ms, a hop {probes.hop_seconds * 1e3:.2f} ms; small probes: "
                  f"dense {probes.dense_small_seconds * 1e3:.2f} ms, local {probes.local_small_seconds * 1e3:.2f} ms "
                  f"(working-set exponents {profile.compute.dense_working_set_exponent:.2f} dense, "
                  f"{profile.compute.local_working_set_exponent:.2f} local); a step in one partition beyond its "
                  f"arithmetic: 8-8-2 {probes.step_rest_seconds * 1e3:.2f} ms, dense probe "
                  f"{probes.dense_rest_seconds * 1e3:.2f} ms; the bulk probe's exchange "
                  f"{probes.bulk_exchange_seconds * 1e3:.1f} ms "
                  f"({profile.message.partition_seconds_per_byte * 1e9:.2f} ns a byte beyond the link, "
                  "at a speed of 1)",
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
                steps_sim = simulated_steps(profile, net, ks, batch)[1:]
                for row, sim, step, speech_only, one, free in zip(
                        rows, predicted(profile, net, ks, batch), steps_sim, predicted(plain, net, ks, batch),
                        predicted(one_rate, net, ks, batch), predicted(no_bytes, net, ks, batch)):
                    row["simulated_speedup"], row["simulated_speech_probe_only"] = sim, speech_only
                    row["simulated_one_rate"], row["simulated_no_byte_cost"] = one, free
                    row["simulated_compute_ms"], row["simulated_exchange_ms"] = step.compute * 1e3, step.exchange * 1e3
                    row["error"] = sim / row["speedup"] - 1
                out["models"][name] = {"parameters": net.size, "rows": rows}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", type=int, default=8)
    p.add_argument("--links", default="1gbit,100mbit", help="comma-separated link rates, one cluster each")
    p.add_argument("--cpu", type=float, default=0.25)
    p.add_argument("--ks", default="1,2,4,8")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
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
    for run in runs:
        hp = run["host_probes"]
        print(f"\n{run['hosts']} emulated hosts, {run['link']} links, {run['cpu']} core each "
              f"(on a host, a speech gradient: {run['gradient_seconds'] * 1e3:.1f} ms; in a host's worker, the "
              f"dense probe's {hp['dense_seconds'] * 1e3:.1f} ms, the local probe's {hp['local_seconds'] * 1e3:.1f} "
              f"ms, a boundary hop {hp['hop_seconds'] * 1e3:.2f} ms; profile {run['profile']}, simulated)")
        print(f"{'model':>6} {'K':>3} {'ms/step':>8} {'arith ms':>8} {'K=1 ms':>7} {'sim arith':>9} "
              f"{'sim exch':>8} {'measured':>9} {'simulated':>10} {'error':>6} {'no byte cost':>13} "
              f"{'sim, one rate':>14} "
              f"{'sim, speech probe only':>23} {'bytes/step':>11}")
        for name, m in run["models"].items():
            for r in m["rows"]:
                print(f"{name:>6} {r['k']:>3} {r['step_ms']:>8.1f} {r['compute_ms']:>8.1f} {r['k1_ms']:>7.1f} "
                      f"{r['simulated_compute_ms']:>9.1f} {r['simulated_exchange_ms']:>8.1f} "
                      f"{r['speedup']:>8.2f}x {r['simulated_speedup']:>9.2f}x {r['error']:>+6.0%} "
                      f"{r['simulated_no_byte_cost']:>12.2f}x {r['simulated_one_rate']:>13.2f}x "
                      f"{r['simulated_speech_probe_only']:>22.2f}x {r['bytes_per_step']:>11,.0f}")
            best = max(m["rows"], key=lambda r: r["speedup"])
            print(f"{name:>6}   measured peak {best['speedup']:.2f}x at K={best['k']}")
    print(f"\npaper (Fig. 3): {PAPER}")
    write_json(args.json, "fig3_emulated", {"runs": runs, "paper": PAPER})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
