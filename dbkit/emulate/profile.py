"""A simulator profile for an emulated cluster, so that the simulator can be checked against it (issue #47).

Each emulated host is a machine of its own: one worker process (one Python thread at a time: one core), a NIC
at the link's set rate each way, no host shared with others. Its arithmetic is this machine's (the ``here``
profile's, from ``dbkit calibrate``) rescaled to the arithmetic measured under the CPU quota: a gradient of the
speech preset timed inside host 1 (its namespace and CPU group, ``gradient_seconds``). ``cpu_factor`` is set so
that the profile's own prediction of that gradient, times the base's worker factor (what a Dask worker's
threads add to a bare process's arithmetic), is the measured time. Every reservation on a simulated machine is
multiplied by ``cpu_factor`` (a computation, a shard's service, a message's CPU), so the machine's speed goes
there. (The base profile may come from another machine: this session's measured a speech gradient at 8.2 ms
with no quota where ``here`` predicts 4.0 ms, so scaling ``here`` by the quota's slowdown alone left the
simulator twice too fast.)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import asdict

from ..runtime.sim.profile import Profile
from ..runtime.sim.profile import load as load_profile
from .cluster import ClusterSpec
from .exchange_fit import fit_exchange
from .host_probe_record import HostProbes, checked_seconds
from .links import BURST_BYTES, parse_rate
from .probe_networks import BULK_UNITS, PROBE_BATCH, PROBE_MODELS, probe_network, probe_working_set

__all__ = ["BULK_UNITS", "LINK_LATENCY", "PROBE_BATCH", "PROBE_MODELS", "HostProbes", "emulated_profile",
           "gradient_seconds", "predicted_gradient_seconds", "probe_network", "probe_seconds", "probe_working_set"]

LINK_LATENCY = 50e-6  # one way through two veth ends and the bridge, unloaded (tens of microseconds)

PROBE = "from dbkit.emulate.profile import probe_seconds; print(probe_seconds('MODEL', REPS, BATCH))"


def probe_seconds(model: str = "speech", reps: int = 20, batch: int = PROBE_BATCH) -> float:
    """Seconds of one gradient of ``probe_network(model)`` over ``batch`` examples in this process, with one
    BLAS thread (the mean of ``reps`` after one not counted)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    net = probe_network(model)
    rng = np.random.default_rng(0)
    p = net.init_params(0)
    X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
    y = rng.integers(0, net.n_classes, batch)
    with threadpool_limits(1):
        net.loss_and_grad(p, X, y)
        began = time.perf_counter()
        for _ in range(reps):
            net.loss_and_grad(p, X, y)
        return (time.perf_counter() - began) / reps


def _gradient_seconds(command_prefix: list[str], reps: int, model: str) -> float:
    code = PROBE.replace("REPS", str(reps)).replace("BATCH", str(PROBE_BATCH)).replace("MODEL", model)
    done = subprocess.run([*command_prefix, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the compute probe failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.split()[-1])


def gradient_seconds(host: int | None = 1, reps: int = 20, rounds: int = 3, model: str = "speech") -> float:
    """Seconds of one gradient of ``probe_network(model)`` (batch 32, one BLAS thread) on emulated host ``host``
    (its CPU share; ``None``: a process with no quota): the median of ``rounds`` measurements. The emulated
    cluster must be up for a host."""
    prefix = [] if host is None else [sys.executable, "-m", "dbkit.emulate.enter", f"dbkit-h{host}", f"dbkit-h{host}",
                                      "--"]
    return statistics.median(_gradient_seconds(prefix, reps, model) for _ in range(rounds))


def predicted_gradient_seconds(profile: Profile, batch: int = PROBE_BATCH) -> float:
    """What ``profile`` charges for the probe's gradient (the speech preset at ``batch``), before ``cpu_factor``."""
    from ..nn import build
    from ..runtime.sim.cost import CostModel
    from ..runtime.sim.shape import ModelShape

    fixed, parallel = CostModel(profile, ModelShape.of(build("speech", 440, 64))).gradient_parts(batch)
    return fixed + parallel


def _rate(profile: Profile, cpu_factor: float, measured_seconds: float, model: str,
          batch: int = PROBE_BATCH) -> float:
    """The rate of ``model``'s kind of arithmetic (``"dense"`` or ``"local"``, or their ``-small`` probes) at
    which ``profile`` (its other rates, times ``cpu_factor``) charges ``probe_network(model)``'s gradient
    ``measured_seconds``."""
    from ..runtime.sim.cost import CostModel
    from ..runtime.sim.shape import ModelShape

    kind = model.split("-")[0]
    shape = ModelShape.of(probe_network(model))
    flops = shape.gradient_flops()[0 if kind == "dense" else 1]
    rate = profile.compute.dense_flops_per_second if kind == "dense" else profile.compute.local_flops_per_second
    fixed, parallel = CostModel(profile, shape).gradient_parts(batch)  # the cost model's charge, less this kind's
    rest = fixed + parallel - batch * flops / rate
    left = measured_seconds / cpu_factor - rest
    if left <= 0:
        raise ValueError(f"the {model} probe's {measured_seconds * 1e3:.2f} ms leaves nothing for its {kind} "
                         f"arithmetic after the rest of {profile.name}'s charge ({rest * 1e3:.2f} ms)")
    return batch * flops / left


def _working_set(profile: Profile, cpu_factor: float, kind: str, small_seconds: float) -> tuple[Profile, str]:
    """``profile`` with ``kind``'s rate made to depend on the working set (``ComputeSpec.rate``): the exponent
    that takes the full probe's rate (``profile``'s) to the rate the small probe measured ``small_seconds`` at,
    between the two probes' working sets (within 0 and 1), the floor at the small one's; and a comment."""
    import math

    big_ws, small_ws = probe_working_set(kind), probe_working_set(f"{kind}-small")
    big = getattr(profile.compute, f"{kind}_flops_per_second")
    small = _rate(profile, cpu_factor, small_seconds, f"{kind}-small")
    exponent = min(1.0, max(0.0, math.log(small / big) / math.log(big_ws / small_ws)))
    out = profile.but(compute={f"{kind}_working_set_bytes": big_ws, f"{kind}_working_set_floor_bytes": small_ws,
                               f"{kind}_working_set_exponent": exponent})
    return out, (f"the {kind} probe's first layer touches {big_ws / 1e6:.1f} MB and runs at "
                 f"{big / 1e9:.2f} Gflop/s; its {kind}-small probe's {small_ws / 1e6:.2f} MB ran at {small / 1e9:.2f} "
                 f"({small_seconds * 1e3:.2f} ms a gradient): a rate in (working set)^-{exponent:.3f}")


def _step_rest(profile: Profile, cpu_factor: float, alone: float, dense: float, comments: dict[str, str]
               ) -> Profile:
    """``profile`` charging a partitioned step's own work as measured in one partition: ``alone``, the tiny
    network's step (its two layers' fixed work: ``layer_seconds``, charged twice a layer; no ``step_seconds``)
    and ``dense``, the dense probe's beyond its arithmetic (the same, and its gradient gathered:
    ``gather_seconds_per_parameter``)."""
    from ..runtime.sim.shape import ModelShape

    layers = sum(1 for layer in ModelShape.of(probe_network("dense")).layers if layer.has_params)  # as the tiny's
    parameters = probe_network("dense").size
    gather = max(0.0, dense - alone) / parameters / cpu_factor
    comments["compute.layer_seconds"] = (f"the hop probe's 8-8-2 network's step in one partition on a host: "
                                         f"{alone * 1e3:.2f} ms, over its 2 layers, twice each, over cpu_factor")
    comments["compute.gather_seconds_per_parameter"] = (
        f"the dense probe's step in one partition on a host beyond its arithmetic: {dense * 1e3:.2f} ms, less the "
        f"8-8-2 network's, over its {parameters:,} parameters, over cpu_factor")
    return profile.but(compute={"layer_seconds": alone / (2 * layers) / cpu_factor, "step_seconds": 0.0,
                                "gather_seconds_per_parameter": gather})


def emulated_profile(spec: ClusterSpec, measured_seconds: float, base: str | Profile = "here",
                     probes: HostProbes | None = None) -> Profile:
    """``base`` (default ``here``) turned into ``spec``'s emulated cluster: ``spec.hosts`` machines of one core
    each, NICs at the link's rate, ``LINK_LATENCY``, no shared host, and ``cpu_factor`` such that the probe's
    gradient costs ``measured_seconds`` (``gradient_seconds()`` on a host) times the base's worker factor.

    With ``probes`` (measured in a host's worker, so no worker factor applies), fully connected and locally
    connected arithmetic are charged at the rates that give the dense and the local probe their measured
    times, and a boundary message between partitions costs its measured hop beyond the link's latency,
    instead of the base's rates and its Dask actor call (a partitioned step: DistBelief Sec. 3, Fig. 3). Where
    ``probes`` has the small probes too, each kind's rate also depends on a layer part's working set
    (``ComputeSpec.rate``), between the two probes' (the less a partition touches, the faster it computes)."""
    measured_seconds = checked_seconds("measured_seconds", measured_seconds)
    b = load_profile(base)
    cpu_factor = measured_seconds * b.machine.cpu_factor / predicted_gradient_seconds(b)
    rate = parse_rate(spec.link)
    share = "uncapped" if spec.cpu is None else f"{spec.cpu} core"
    name = f"emulated-{spec.hosts}x{spec.link}-{share.replace(' core', 'core')}"
    machine = {"cores": 1, "bandwidth": rate / 8, "latency": LINK_LATENCY, "machines": spec.hosts,
               "cpu_factor": cpu_factor, "host_cores": 0, "host_load": 0.0, "shared_links": 1,
               "burst_bytes": BURST_BYTES}
    comments = {**b.comments,
                "machine.bandwidth": f"{spec.link} each way, the links' set rate (tc tbf on both ends; the "
                                     "bucket counts Ethernet and IP headers: payload about 4% below)",
                "machine.latency": "veth, bridge and veth, unloaded; the bucket's queue adds to it under load "
                                   "(the NIC's hold models that)",
                "machine.cpu_factor": f"a speech gradient (batch {PROBE_BATCH}) measured on a host at {share}: "
                                      f"{measured_seconds * 1e3:.2f} ms, times the base's ({b.name}) worker factor "
                                      f"{b.machine.cpu_factor:.3f}, over the base's prediction of it",
                "machine.burst_bytes": f"the links' token bucket ({BURST_BYTES:,} bytes, tc tbf's burst): a "
                                       "message that finds it full leaves at the veth's speed",
                "machine.host_cores": "0: every emulated host is a machine of its own with its own CPU share",
                "machine.shared_links": "1: TCP flows through a shaped link share it (1, 4 and 7 bulk flows into "
                                        "or out of one host carried 95.8-97.2% of 100mbit together, 2026-11-30); "
                                        "first come, first served was 18-51% fast where messages overlap"}
    out = b.but(machine=machine)
    measured: dict = {**b.measured, "emulated_gradient_seconds": measured_seconds}
    if probes is not None:
        out = out.but(compute={"dense_flops_per_second": _rate(out, cpu_factor, probes.dense_seconds, "dense")})
        out = out.but(compute={"local_flops_per_second": _rate(out, cpu_factor, probes.local_seconds, "local")},
                      message={"partition_message_seconds": max(0.0, probes.hop_seconds - LINK_LATENCY) / cpu_factor})
        where = f"in a task on a host's worker at {share}"
        comments["compute.dense_flops_per_second"] = (
            f"the dense probe's gradient (batch {PROBE_BATCH}) {where}: {probes.dense_seconds * 1e3:.2f} ms, "
            "over the rest of its charge")
        comments["compute.local_flops_per_second"] = (
            f"the local probe's gradient (batch {PROBE_BATCH}) {where}: {probes.local_seconds * 1e3:.2f} ms, "
            "over the rest of its charge (the dense rate above included)")
        for kind in ("dense", "local"):
            small = getattr(probes, f"{kind}_small_seconds")
            if small is not None:
                out, comments[f"compute.{kind}_working_set_exponent"] = _working_set(out, cpu_factor, kind, small)
        if probes.step_rest_seconds is not None and probes.dense_rest_seconds is not None:
            out = _step_rest(out, cpu_factor, probes.step_rest_seconds, probes.dense_rest_seconds, comments)
        comments["message.partition_message_seconds"] = (
            f"one boundary message's hop between two hosts' partitions {where}: {probes.hop_seconds * 1e3:.3f} ms, "
            "less the link's latency, over cpu_factor (the partition wire, not a Dask actor call)")
        if probes.fresh_seconds_per_byte is not None:
            out = out.but(compute={"fresh_seconds_per_byte": probes.fresh_seconds_per_byte / cpu_factor})
            comments["compute.fresh_seconds_per_byte"] = (
                f"an array of 64 MiB made anew {where} against writing one already made: "
                f"{probes.fresh_seconds_per_byte * 1e9:.3f} ns a byte more, over cpu_factor")
        if probes.bulk_exchange_seconds is not None:
            found = {("bulk", 2): probes.bulk_exchange_seconds, ("thin", 2): probes.thin_exchange_seconds,
                     ("thin", 4): probes.thin4_exchange_seconds}
            out = fit_exchange(out, {key: v for key, v in found.items() if v is not None}, comments)
        measured["emulated_host_probes"] = asdict(probes)
    return Profile(name, f"an emulated cluster of {spec.hosts} hosts, {spec.link} links, {share} each "
                   f"(dbkit.emulate), from {b.name}", out.machine, out.compute, out.shard, out.message, comments,
                   measured)
