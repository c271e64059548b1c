"""``dbkit calibrate``: measure this machine and write the ``here`` profile.

What is measured, each with one BLAS thread as dbkit's replicas run:

- **arithmetic**: every preset's loss and gradient at three batch sizes (each
  model keeps its own line, ``measured["gradients"]``; a least-squares fit
  over all of them gives the rates used for any other model), and a
  replica's own work per step (accrue, local step, finiteness check);
- **a shard's service**: push (SGD and Adagrad), fetch and a vector command,
  per float;
- **a replica's exchanges**: a replica running its own loop on a thread, its
  two shards on its own process (``ThreadedShard``) or on another one over
  the shard wire (``calibrate_rig``), CPU read thread by thread, at three
  model sizes: what one fetch and push costs the replica's worker, the
  shards' worker, and a shard on the replica's own worker, per message size;
- **the control plane** (Dask: actor calls, tasks, boundary messages
  between partitions), measured by ``dbkit.calibration.control_plane`` and passed in.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import numpy as np

from ..nn import build
from ..runtime.sim.profile import ComputeSpec, MachineSpec, MessageSpec, Profile, ShardSpec
from ..runtime.sim.shape import ModelShape
from .fit import fit_to_real_steps
from .rig import RigTimes

PRESETS = (("linear", "digits"), ("mlp", "digits"), ("speech", "speech"), ("image-local", "digits"),
           ("signal-local", "signals"))
BATCHES = (8, 32, 128)


def median_seconds(fn: Callable[[], Any], repeats: int, budget: float = 1.0) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls (fewer if they would take over ``budget`` seconds)."""
    fn()
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < repeats and (len(times) < 5 or time.perf_counter() - began < budget):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def time_gradients(quick: bool = False) -> list[dict]:
    """Every preset's loss and gradient at each batch size: ``{model, shape, batch, seconds}`` rows."""
    from ..data import load

    rows = []
    for model, dataset in PRESETS:
        data = load(dataset)
        net = build(model, data.n_features, data.n_classes, l2=1e-4, image_shape=data.image_shape)
        params = net.init_params(0)
        for batch in BATCHES:
            X, y = data.X_train[:batch], data.y_train[:batch]
            seconds = median_seconds(partial(net.loss_and_grad, params, X, y), 15 if quick else 60,
                                     0.3 if quick else 1.0)
            rows.append({"model": model, "shape": ModelShape.of(net), "batch": batch, "seconds": seconds})
    return rows


def fit_compute(rows: list[dict]) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Rates and fixed costs fitted to every row (non-negative least squares on relative errors), and each
    model's own line ``seconds = a + b * batch``."""
    from scipy.optimize import nnls

    A, b = [], []
    for r in rows:
        shape: ModelShape = r["shape"]
        dense_f, local_f, units = shape.gradient_flops()
        layers = sum(1 for layer in shape.layers if layer.has_params)
        A.append(np.array([1.0, layers, r["batch"] * dense_f, r["batch"] * local_f, r["batch"] * units]) / r["seconds"])
        b.append(1.0)
    x, _ = nnls(np.array(A), np.array(b))
    fitted = {"step_seconds": x[0], "layer_seconds": x[1],
              "dense_flops_per_second": 1.0 / max(x[2], 1e-18), "local_flops_per_second": 1.0 / max(x[3], 1e-18),
              "elementwise_per_second": 1.0 / max(x[4], 1e-18)}
    lines: dict[str, list[float]] = {}
    for key in {r["shape"].key for r in rows}:
        pts = [(r["batch"], r["seconds"]) for r in rows if r["shape"].key == key]
        slope, intercept = np.polyfit([p[0] for p in pts], [p[1] for p in pts], 1)
        lines[key] = [max(0.0, float(intercept)), max(0.0, float(slope))]
    return fitted, lines


def time_shard(quick: bool = False) -> dict[str, float]:
    """A shard's service: per push (SGD, Adagrad), fetch and vector command, fixed and per float."""
    from ..ps import ParameterShard

    reps = 20 if quick else 60
    out: dict[str, list[tuple[int, float]]] = {}
    for n in (10_000, 1_000_000):
        rng = np.random.default_rng(0)
        g = (rng.standard_normal(n) * 1e-4).astype(np.float32)
        for rule in ("sgd", "adagrad"):
            s = ParameterShard(0, 0, n, np.zeros(n, np.float32), rule, 1e-3)
            out.setdefault(rule, []).append((n, median_seconds(partial(s.push, g, s.version), reps)))
        s = ParameterShard(0, 0, n, np.zeros(n, np.float32), "sgd", 1e-3)
        out.setdefault("fetch", []).append((n, median_seconds(s.fetch, reps)))
        s.vectors("copy", "params", "x")
        out.setdefault("vector", []).append((n, median_seconds(partial(s.vectors, "axpy", 0.5, "params", "x"), reps)))
    slopes = {k: max(0.0, (v[1][1] - v[0][1]) / (v[1][0] - v[0][0])) for k, v in out.items()}
    fixed = min(max(0.0, v[0][1] - slopes[k] * v[0][0]) for k, v in out.items())
    return {"request_seconds": fixed, "push_seconds_per_float_sgd": slopes["sgd"],
            "push_seconds_per_float_adagrad": slopes["adagrad"], "fetch_seconds_per_float": slopes["fetch"],
            "vector_seconds_per_float": slopes["vector"]}


def time_replica_vectors(quick: bool = False) -> float:
    """Seconds per parameter of a replica's own vector work each step: its accrue with the local step
    (``Exchange.accrue``) and the finiteness check of its gradient (a dot)."""
    from ..downpour.exchange import Exchange
    from ..ps import local_shards

    n = 1_000_000
    rng = np.random.default_rng(0)
    grad = (rng.standard_normal(n) * 1e-4).astype(np.float32)
    params = np.zeros(n, np.float32)
    ex = Exchange(local_shards(np.zeros(8, np.float32), 1), n, True, lambda p: None, lambda a: None)
    ex.accrue(grad, 32)
    def step() -> None:
        ex.accrue(grad, 32, (params, 1e-9))
        np.dot(grad, grad)

    seconds = median_seconds(step, 10 if quick else 30)
    return seconds / n


def median_times(times: list[RigTimes]) -> RigTimes:
    """Field by field, the median of several measurements of the same rig."""
    return RigTimes(*(float(np.median([getattr(t, f) for t in times])) for f in RigTimes.__dataclass_fields__))


def time_contention(quick: bool = False) -> float:
    """What each other replica on the same worker adds to a replica's arithmetic, as a fraction of it: two
    and three replicas taking turns on one core against one alone (the digits MLP)."""
    import os

    from .rig import time_together

    if not hasattr(os, "sched_setaffinity"):
        return 0.0
    seconds = 0.5 if quick else 1.0
    one = float(np.median([time_together("mlp", "digits", 1, seconds) for _ in range(1 if quick else 3)]))
    extra = [(time_together("mlp", "digits", k, seconds) / one - 1.0) / (k - 1) for k in (2, 3)]
    return max(0.0, float(np.median(extra)))


def time_releases(quick: bool = False) -> dict[str, tuple[float, float]]:
    """Per rig model, how soon a computing thread lets a woken one in and what each such hand-off costs it
    (``calibrate_rig.time_release``)."""
    import os

    from .rig import time_release

    if not hasattr(os, "sched_setaffinity"):
        return {}
    return {model: time_release(model, dataset, 100 if quick else 300) for model, dataset in
            (("mlp", "digits"), ("speech", "speech"))}


def time_exchanges(shard: dict[str, float], gradients: dict[str, list[float]], quick: bool = False
                   ) -> tuple[list[list[float]], list[dict], list[tuple[int, float]]]:
    """What a replica's exchanges cost its worker and the shards' workers, from the replica rig
    (``calibrate_rig``) at three model sizes, each with two shards pushed to and fetched from every step:

    - ``table``: per message size, ``[bytes, client, server, local]`` CPU seconds per message (a push_fetch
      is two): a remote shard's caller (its replica thread and wire thread), the remote shard's process
      (its arithmetic excepted, which the shard's service costs), and a call to a shard on the caller's
      own worker (the replica thread and the shard's call thread, arithmetic excepted);
    - the rig's rows as measured;
    - per model, ``(parameters, seconds)`` of a replica's own work per step beyond its gradient.
    """
    from .rig import RIG_MODELS, ShardProcess, shard_sizes, time_replica

    table, rows, extras = [], [], []
    seconds, rounds = (0.5, 1) if quick else (0.8, 3)
    with ShardProcess(shard_sizes()) as server:
        for model, dataset in RIG_MODELS:
            kinds = {"alone": (100_000, False), "local": (1, False), "remote": (1, True)}
            times: dict[str, list[RigTimes]] = {k: [] for k in kinds}
            for _ in range(rounds):  # interleaved, and the median taken: threads interleave differently each time
                for kind, (n, far) in kinds.items():
                    times[kind].append(time_replica(server, model, dataset, n, far, seconds=seconds))
            alone, local, remote = (median_times(times[k]) for k in kinds)
            floats = max(shard_sizes(((model, dataset),)))
            key = next(k for k in gradients if k.startswith(f"{model}:"))
            params = int(key.split(":")[1])
            a, b = gradients[key]
            arithmetic = (2 * shard["request_seconds"] + floats * (shard["push_seconds_per_float_sgd"]
                                                                    + shard["fetch_seconds_per_float"]))
            per_call = {  # two calls a step (one per shard); two messages a call
                "client": ((remote.replica - alone.replica) + remote.wire) / 2,
                "server": remote.server / 2 - arithmetic,
                "local": ((local.replica - alone.replica) + local.shard_calls) / 2 - arithmetic}
            table.append([4 * floats] + [max(0.0, per_call[k] / 2) for k in ("client", "server", "local")])
            rows.append({"model": model, "floats_per_shard": floats, **{
                f"{name}_{k}": v for name, t in (("alone", alone), ("local", local), ("remote", remote))
                for k, v in t.__dict__.items()}})
            extras.append((params, max(0.0, alone.replica - (a + b * 32))))
    return sorted(table), rows, extras


def calibrate(control: dict[str, float], worker_steps: dict[str, float], host_load: float = 0.0,
              real_steps: dict[str, dict[int, float]] | None = None, quick: bool = False,
              log: Callable[[str], None] = print) -> Profile:
    """The ``here`` profile of this machine. ``control`` holds the Dask control plane's one-way times
    (``control_seconds``, ``task_seconds``, ``partition_message_seconds``); ``worker_steps`` the seconds per
    step of one replica of each rig model in a real Dask worker with no exchange (``{model: seconds}``);
    ``host_load`` the cores the driver's process keeps busy while replicas train (``time_host_load``)."""
    import os

    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        log("arithmetic: every preset's gradient at batch sizes 8, 32, 128 ...")
        rows = time_gradients(quick)
        fitted, lines = fit_compute(rows)
        log("a shard's arithmetic ...")
        shard = time_shard(quick)
        log("a replica's exchanges with shards on its own worker and on another, thread by thread ...")
        table, rig, extras = time_exchanges(shard, lines, quick)
        log("replicas taking turns on one core ...")
        contention = time_contention(quick)
        log("a woken thread's wait beside a computing one ...")
        release = time_releases(quick)
    alone = {r["model"]: r["alone_wall"] for r in rig}
    ratios = [worker_steps[m] / alone[m] for m in worker_steps if alone.get(m)]
    cpu_factor = max(1.0, float(np.median(ratios))) if ratios else 1.0
    host_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_parameter = time_replica_vectors(quick)
    small = [(n, t) for n, t in extras if n < 100_000]  # the big model's extras drown in its gradient's noise
    fixed = float(np.median([max(0.0, t - per_parameter * n) for n, t in small]))
    message = {"cpu_seconds": table[0][1], "cpu_seconds_per_byte": max(0.0, (table[-1][1] - table[0][1])
                                                                         / (table[-1][0] - table[0][0]))}
    measured = {"gradients": lines, "wire_cpu": table, "rig": rig, "replica_extras": extras,
                "worker_steps": worker_steps, "worker_ratios": ratios, "release": release,
                "date": datetime.now().isoformat(timespec="seconds"), "control": control,
                "gradient_rows": [{"model": r["model"], "batch": r["batch"], "seconds": r["seconds"]} for r in rows]}
    profile = Profile(
        name="here", description=f"this machine as measured by dbkit calibrate on {measured['date']}: the two "
        "worker processes of dbkit run's LocalCluster, each one core (a worker's Python runs one thread at a time)",
        machine=MachineSpec(cores=1, bandwidth=1e10, latency=0.0, machines=2, threads_per_replica=1,
                            cpu_factor=cpu_factor, host_cores=host_cores, switch_seconds=sys.getswitchinterval(),
                            host_load=min(host_load, host_cores - 0.25),
                            release_seconds=max(1e-6, max(r for r, _ in release.values())) if release else 0.0,
                            handoff_seconds=float(np.median([h for _, h in release.values()])) if release else 0.0),
        compute=ComputeSpec(**fitted, update_seconds_per_parameter=per_parameter, replica_step_seconds=fixed,
                            contention=contention),
        shard=ShardSpec(**shard),
        message=MessageSpec(**message, header_bytes=64, local_call_seconds=0.0, **control),
        comments=COMMENTS, measured=measured)
    if real_steps:
        log("the rig's costs fitted to real steps in a worker ...")
        profile = fit_to_real_steps(profile, real_steps)
    return profile


COMMENTS = {
    "machine.cores": "1: a worker process runs one Python thread at a time (the GIL), whatever the host's cores",
    "machine.machines": "2: dbkit run's LocalCluster has two worker processes; the driver is a machine of its own",
    "machine.host_cores": "the cores this process may run on: the workers and the driver are processes of one "
                          "computer, so a computation holds its process (one Python thread at a time) and one of "
                          "these cores",
    "machine.switch_seconds": "Python's switch interval (sys.getswitchinterval()): a request or reply reaching a "
                              "worker while every core of the host computes waits for a thread to let go, at most "
                              "this long",
    "machine.release_seconds": "how much later than with the process idle a thread woken beside a computing one "
                               "runs (measured.release, the larger of the digits MLP's and the speech preset's; at "
                               "least 1 us): numpy lets the interpreter lock go many times a gradient, so a shard's "
                               "service or a reply's handling runs then, not after the whole computation",
    "machine.handoff_seconds": "what each such wake-up costs the computing thread (the lock's switches there and "
                               "back), the median over the two models of its steps lost per wake-up (measured.release)",
    "machine.host_load": "cores' worth of CPU the driver's process (the LocalCluster's scheduler runs in it) used "
                         "while two replicas trained (time_host_load): the workers' share of the host is the rest",
    "machine.bandwidth": "10 GB/s: loopback moves bytes as fast as the CPU copies them; that CPU is in "
                         "message.cpu_seconds_per_byte",
    "machine.latency": "0: on one host every wait of a message is some thread's CPU, in measured.wire_cpu",
    "machine.cpu_factor": "what a real Dask worker's arithmetic takes over the rig's: fitted so that one simulated "
                          "replica of the digits MLP steps as fast as a real one exchanging every 16th step and "
                          "every step (measured.fit); measured.worker_steps against the rig's is the same ratio "
                          "with no exchange at all",
    "message.wire_scale": "what a real Dask worker's exchanges cost over the rig's (measured.wire_cpu), fitted with "
                          "machine.cpu_factor to the same two real runs",
    "measured.gradient_factor": "per model, its measured gradient line in a real worker over the rig's (after "
                                "machine.cpu_factor): fitted to a real step of the speech preset exchanging every "
                                "16th step, whose arithmetic is BLAS-bound where the MLP's is Python-bound",
    "measured.wire_cpu_rig": "the message table as the rig measured it; measured.wire_cpu's largest row is scaled "
                             "(measured.fit.large_message_scale) to a real step of the speech preset exchanging "
                             "every step",
    "compute.contention": "two and three replicas computing on threads of one process held to one core, against "
                          "one alone: what each other replica adds to a step (threads take turns at one lock)",
    "measured.wire_cpu": "per message size in bytes: CPU seconds of the caller of a remote shard (its replica "
                         "thread and wire thread), of the remote shard's worker, and of a call to a shard on the "
                         "caller's own worker, each message (arithmetic excepted); from the replica rig",
    "compute": "each preset's measured line (measured.gradients) for the presets; the rates, fitted to all of "
               "them, for any other model",
    "message.control_seconds": "half a Dask actor call's round trip from the driver (a coordinator's command)",
    "message.task_seconds": "half a Dask task's round trip (a Sandblaster work unit or flush)",
    "message.partition_message_seconds": "one way of a Dask actor call from a task to an actor on the other "
                                         "worker (a boundary slice between partitions)",
}
