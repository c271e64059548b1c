"""A replica as it runs on a worker, without Dask: what ``dbkit calibrate`` times thread by thread.

The replica runs its own loop (``run_replica_loop``) on a thread, its shards
either on this process behind ``ThreadedShard`` s (a shard on the replica's
own worker) or in a second process behind its ``WireServer``, reached over
``WireShard`` s (a shard on another worker). Each thread's CPU is read from
the kernel (``pthread_getcpuclockid``), the server process's from itself.
Measured at ``n_fetch = n_push = n`` and with no exchange at all, the
difference per step is what one exchange costs each thread.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..data import load
from ..downpour.replica import DownpourReplica
from ..downpour.replica_loop import run_replica_loop
from ..nn import build
from ..ps import ParameterShard, ShardedParameters, balanced_layout
from ..training.figures import NO_CAP, ReplicaSettings


def serve_shards(sizes: tuple[int, ...], out: Any, commands: Any) -> None:
    """In a process of its own: one shard of each size (keys ``s{size}``) on a ``WireServer``; answers
    ``cpu`` with its CPU seconds so far and ends at ``stop``."""
    from threadpoolctl import threadpool_limits

    from ..ps.wire_server import WireServer

    with threadpool_limits(1):
        shards = {f"s{n}": ParameterShard(0, 0, n, np.zeros(n, np.float32), "sgd", 1e-6) for n in sizes}
        server = WireServer(shards.get)
        out.put(server.address)
        while commands.get() != "stop":
            out.put(time.process_time())
        server.close()


class ShardProcess:
    """``serve_shards`` in a spawned process, for the life of a ``with`` block."""

    def __init__(self, sizes: tuple[int, ...]) -> None:
        ctx = mp.get_context("spawn")
        self.out, self.commands = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=serve_shards, args=(tuple(sorted(set(sizes))), self.out, self.commands),
                                daemon=True)

    def __enter__(self) -> ShardProcess:
        self.proc.start()
        self.address = self.out.get(timeout=60)
        return self

    def cpu(self) -> float:
        self.commands.put("cpu")
        return float(self.out.get(timeout=30))

    def __exit__(self, *exc: Any) -> None:
        self.commands.put("stop")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds ``thread`` has used (Linux and macOS; 0 where the kernel does not say)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))  # type: ignore[arg-type]
    except (OSError, AttributeError, TypeError):
        return 0.0


@dataclass(frozen=True)
class RigTimes:
    """Seconds per replica step: wall, and CPU of the replica's thread, its shard-call threads, its wire
    threads and the remote shards' process."""

    wall: float
    replica: float
    shard_calls: float
    wire: float
    server: float


RIG_MODELS = (("linear", "digits"), ("mlp", "digits"), ("speech", "speech"))


def shard_sizes(models: tuple[tuple[str, str], ...] = RIG_MODELS) -> tuple[int, ...]:
    """The sizes of the two shards of each of ``models``: what the rig's shard process serves."""
    sizes: list[int] = []
    for model, dataset in models:
        data = load(dataset)
        net = build(model, data.n_features, data.n_classes)
        sizes += [b - a for a, b in balanced_layout(net.size, 2).ranges]
    return tuple(sizes)


def time_replica(server: ShardProcess, model: str, dataset: str, n: int, remote: bool,
                 seconds: float = 1.0) -> RigTimes:
    """One replica of ``model`` with two shards, both on its own process (``remote=False``) or both in
    ``server``'s, at ``n_fetch = n_push = n``."""
    from ..ps.threaded_shard import ThreadedShard
    from ..ps.wire_client import WireShard

    data = load(dataset)
    net = build(model, data.n_features, data.n_classes, l2=1e-4)
    params = net.init_params(0)
    layout = balanced_layout(net.size, 2)
    if remote:
        ends: list[Any] = [WireShard(server.address, f"s{b - a}", pusher="r0") for a, b in layout.ranges]
    else:
        ends = [ThreadedShard(ParameterShard(i, a, b, params[a:b], "sgd", 1e-6))
                for i, (a, b) in enumerate(layout.ranges)]
    replica = DownpourReplica(0, net, data.X_train, data.y_train, ShardedParameters(ends, layout, name="r0"),
                              32, n, n, 1e-6)
    settings = [ReplicaSettings(n, n, 1e-6, max_steps=NO_CAP)]
    figures: list[Any] = []
    thread = threading.Thread(target=_run, args=(replica, lambda: settings[0], figures.append), name="rig-replica")
    thread.start()
    try:
        time.sleep(0.3)  # started, first fetch done, warm
        helpers = [t for t in threading.enumerate() if t.name.startswith(("dbkit-shard-call", "dbkit-wire"))]
        before = ([thread_cpu(t) for t in (thread, *helpers)], server.cpu(), replica.counters.steps,
                  time.perf_counter())
        time.sleep(seconds)
        after = ([thread_cpu(t) for t in (thread, *helpers)], server.cpu(), replica.counters.steps,
                 time.perf_counter())
    finally:
        settings[0] = settings[0].but(stop=True)
        thread.join(30)
        for end in ends:
            end.close()
    steps = max(1, after[2] - before[2])
    cpu = [(b - a) / steps for a, b in zip(before[0], after[0])]
    calls = sum(c for t, c in zip(helpers, cpu[1:]) if t.name.startswith("dbkit-shard-call"))
    wire = sum(c for t, c in zip(helpers, cpu[1:]) if t.name.startswith("dbkit-wire"))
    return RigTimes((after[3] - before[3]) / steps, cpu[0], calls, wire, (after[1] - before[1]) / steps)


def time_together(model: str, dataset: str, k: int, seconds: float = 1.0) -> float:
    """Seconds per step of ``k`` replicas of ``model`` computing at once on threads of this process held to
    one core (as a worker's are when every core is busy), with no exchange; per replica step of the whole
    process (1 / its steps per second). With one core and one interpreter lock, this is ``k`` replicas
    taking turns: any excess over one replica's step is what their turns cost."""
    import os

    data = load(dataset)
    net = build(model, data.n_features, data.n_classes, l2=1e-4)
    params = net.init_params(0)
    from ..ps import local_shards

    replicas = [DownpourReplica(i, net, data.X_train, data.y_train, local_shards(params, 1), 32, 100_000, 100_000,
                                1e-6, seed=i) for i in range(k)]
    settings = [ReplicaSettings(100_000, 100_000, 1e-6, max_steps=NO_CAP)]
    threads = [threading.Thread(target=_run, args=(r, lambda: settings[0], lambda f: None)) for r in replicas]
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    try:
        for t in threads:
            t.start()
        time.sleep(0.3)
        s0, t0 = sum(r.counters.steps for r in replicas), time.perf_counter()
        time.sleep(seconds)
        s1, t1 = sum(r.counters.steps for r in replicas), time.perf_counter()
    finally:
        settings[0] = settings[0].but(stop=True)
        for t in threads:
            t.join(30)
        os.sched_setaffinity(0, before)
    return (t1 - t0) / max(1, s1 - s0)


def _run(replica: DownpourReplica, settings: Any, publish: Any) -> None:
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        run_replica_loop(replica, settings, publish, poll=0.001)


def time_release(model: str, dataset: str, wakes: int = 300) -> tuple[float, float]:
    """How a thread woken beside ``model``'s gradients (computed on another thread of this process, held
    to one core) shares the interpreter lock: ``(release, handoff)``. ``release``: how much later than
    with the process idle it runs (the median overshoot of short sleeps, busy against idle); ``handoff``:
    what each of its wake-ups costs the computation (its steps lost, per wake-up). They set
    ``MachineSpec.release_seconds`` and ``handoff_seconds``."""
    import os

    data = load(dataset)
    net = build(model, data.n_features, data.n_classes, l2=1e-4)
    params, X, y = net.init_params(0), data.X_train[:32], data.y_train[:32]
    stop, steps = threading.Event(), [0]

    def compute() -> None:
        while not stop.is_set():
            net.loss_and_grad(params, X, y)
            steps[0] += 1

    def overshoot() -> float:
        rng, out = np.random.default_rng(0), []
        for _ in range(wakes):
            nap = float(rng.uniform(5e-4, 2e-3))
            t0 = time.perf_counter()
            time.sleep(nap)
            out.append(time.perf_counter() - t0 - nap)
        return float(np.median(out))

    def count(seconds: float) -> tuple[int, float]:
        s0, t0 = steps[0], time.perf_counter()
        time.sleep(seconds)
        return steps[0] - s0, time.perf_counter() - t0

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    worker = threading.Thread(target=compute, daemon=True)
    try:
        idle = overshoot()
        worker.start()
        alone, alone_seconds = count(0.5)  # one long sleep: the computation has the lock to itself
        s0, t0 = steps[0], time.perf_counter()
        busy = overshoot()
        together, together_seconds = steps[0] - s0, time.perf_counter() - t0
    finally:
        stop.set()
        worker.join(30)
        os.sched_setaffinity(0, before)
    lost = together_seconds - together * alone_seconds / max(1, alone)
    return busy - idle, max(0.0, lost / wakes)
