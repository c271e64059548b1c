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
from dataclasses import replace
from typing import TYPE_CHECKING

from ..runtime.sim.profile import Profile
from ..runtime.sim.profile import load as load_profile
from .cluster import ClusterSpec
from .links import parse_rate

if TYPE_CHECKING:
    from ..nn import Network

PROBE_BATCH = 32
LINK_LATENCY = 50e-6  # one way through two veth ends and the bridge, unloaded (tens of microseconds)

PROBE = """
import time
import numpy as np
from threadpoolctl import threadpool_limits
from dbkit.emulate.profile import probe_network
net = probe_network("MODEL")
rng = np.random.default_rng(0)
p = net.init_params(0)
X = rng.standard_normal((BATCH, net.in_size)).astype(np.float32); y = rng.integers(0, net.n_classes, BATCH)
with threadpool_limits(1):
    net.loss_and_grad(p, X, y)
    t = time.perf_counter()
    for _ in range(REPS):
        net.loss_and_grad(p, X, y)
    print((time.perf_counter() - t) / REPS)
"""


def probe_network(model: str = "speech") -> Network:
    """The network a compute probe times: ``"speech"``, the speech preset (dense layers: its gradient sets the
    host's speed); ``"local"``, one unshared 5x5 locally connected layer of 16 filters on 32x32x8 inputs and a
    softmax layer (its gradient sets the speed of locally connected arithmetic, which numpy does far less
    efficiently than a matrix product)."""
    from ..nn import Dense, LocallyConnected2D, Network, ReLU, build

    if model == "speech":
        return build("speech", 440, 64)
    if model == "local":
        lc = LocallyConnected2D(32, 32, 8, kernel=5, filters=16)
        return Network([lc, ReLU(lc.out_size), Dense(lc.out_size, 10)], name="local probe")
    raise ValueError(f"model must be 'speech' or 'local', got {model!r}")


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


def _checked_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < 60):
        raise ValueError(f"{name} must be a gradient's seconds, > 0 and < 60, got {value!r}")
    return float(value)


def local_flops_per_second(profile: Profile, cpu_factor: float, measured_seconds: float,
                           batch: int = PROBE_BATCH) -> float:
    """The rate of locally connected arithmetic at which ``profile`` (its other rates, times ``cpu_factor``)
    charges the local probe's gradient (``probe_network("local")``) ``measured_seconds``."""
    from ..runtime.sim.cost import CostModel
    from ..runtime.sim.shape import ModelShape

    shape = ModelShape.of(probe_network("local"))
    local_f = shape.gradient_flops()[1]
    fixed, parallel = CostModel(profile, shape).gradient_parts(batch)  # the cost model's charge, less its local part
    rest = fixed + parallel - batch * local_f / profile.compute.local_flops_per_second
    left = measured_seconds / cpu_factor - rest
    if left <= 0:
        raise ValueError(f"the local probe's {measured_seconds * 1e3:.2f} ms leaves nothing for its locally "
                         f"connected arithmetic after the rest of {profile.name}'s charge ({rest * 1e3:.2f} ms)")
    return batch * local_f / left


def emulated_profile(spec: ClusterSpec, measured_seconds: float, base: str | Profile = "here",
                     local_seconds: float | None = None) -> Profile:
    """``base`` (default ``here``) turned into ``spec``'s emulated cluster: ``spec.hosts`` machines of one core
    each, NICs at the link's rate, ``LINK_LATENCY``, no shared host, and ``cpu_factor`` such that the probe's
    gradient costs ``measured_seconds`` (``gradient_seconds()`` on a host) times the base's worker factor.
    With ``local_seconds`` (``gradient_seconds(model="local")`` on a host), locally connected arithmetic is
    charged at the rate that gives the local probe that time, times the worker factor, instead of the base's."""
    measured_seconds = _checked_seconds("measured_seconds", measured_seconds)
    b = load_profile(base)
    cpu_factor = measured_seconds * b.machine.cpu_factor / predicted_gradient_seconds(b)
    rate = parse_rate(spec.link)
    share = "uncapped" if spec.cpu is None else f"{spec.cpu} core"
    name = f"emulated-{spec.hosts}x{spec.link}-{share.replace(' core', 'core')}"
    machine = {"cores": 1, "bandwidth": rate / 8, "latency": LINK_LATENCY, "machines": spec.hosts,
               "cpu_factor": cpu_factor, "host_cores": 0, "host_load": 0.0, "shared_links": 1}
    comments = {**b.comments,
                "machine.bandwidth": f"{spec.link} each way, the links' set rate (tc tbf on both ends; the "
                                     "bucket counts Ethernet and IP headers: payload about 4% below)",
                "machine.latency": "veth, bridge and veth, unloaded; the bucket's queue adds to it under load "
                                   "(the NIC's hold models that)",
                "machine.cpu_factor": f"a speech gradient (batch {PROBE_BATCH}) measured on a host at {share}: "
                                      f"{measured_seconds * 1e3:.2f} ms, times the base's ({b.name}) worker factor "
                                      f"{b.machine.cpu_factor:.3f}, over the base's prediction of it",
                "machine.host_cores": "0: every emulated host is a machine of its own with its own CPU share",
                "machine.shared_links": "1: TCP flows through a shaped link share it (1, 4 and 7 bulk flows into "
                                        "or out of one host carried 95.8-97.2% of 100mbit together, 2026-11-30); "
                                        "first come, first served was 18-51% fast where messages overlap"}
    out = b.but(machine=machine)
    compute = out.compute
    if local_seconds is not None:
        local_seconds = _checked_seconds("local_seconds", local_seconds)
        compute = replace(compute, local_flops_per_second=local_flops_per_second(
            out, cpu_factor, local_seconds * b.machine.cpu_factor))
        comments["compute.local_flops_per_second"] = (
            f"the local probe's gradient (batch {PROBE_BATCH}) measured on a host at {share}: "
            f"{local_seconds * 1e3:.2f} ms, times the worker factor, over the rest of its charge")
    return Profile(name, f"an emulated cluster of {spec.hosts} hosts, {spec.link} links, {share} each "
                   f"(dbkit.emulate), from {b.name}", out.machine, compute, out.shard, out.message, comments,
                   {**b.measured, "emulated_gradient_seconds": measured_seconds,
                    **({} if local_seconds is None else {"emulated_local_gradient_seconds": local_seconds})})
