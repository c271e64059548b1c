"""What Dask's control plane costs on this machine, for ``dbkit calibrate`` (the simulator's ``here``
profile): a command from the driver to a shard actor, a task sent to a worker and its result, and an
actor call from one worker to another (a boundary slice between partitions). One-way seconds: half
the median round trip, on dbkit's own 2-worker LocalCluster."""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import count

import numpy as np

from ..runtime.dask.cluster import Cluster
from ..runtime.shards import start_shards
from .timing import median_ms

_keys = count()


def _nothing(side) -> int:  # noqa: ANN001 - its worker's TaskSide
    return 0


def _peer_calls(side, key: str, worker: str, calls: int) -> float:  # noqa: ANN001 - its worker's TaskSide
    """From a task: the median round trip of ``calls`` actor calls to the shard ``key`` on ``worker``."""
    from ..ps import ParameterShard

    shard = side.remote(ParameterShard, worker, key)
    times = []
    for _ in range(calls + 1):
        t = time.perf_counter()
        shard.vectors("dot", "params", "params").result()
        times.append(time.perf_counter() - t)
    return float(np.median(times[1:]))


def _median(fn, calls: int) -> float:
    return median_ms(fn, calls) / 1e3


def _window(cluster: Cluster, model: str, dataset: str, replicas: int, n: int, seconds: float,
            measure: Callable[[], float] = time.perf_counter) -> tuple[float, float, int]:
    """A real Downpour run of ``model`` (``replicas``, n_fetch = n_push = ``n``) on ``cluster``, measured over
    ``seconds`` after its start: wall seconds, ``measure()``'s change over them, and the steps taken."""
    import threading

    from ..downpour.job import DownpourSGD

    with DownpourSGD(model, dataset, replicas=replicas, shards=2, n_fetch=n, n_push=n, optimizer="sgd", lr=1e-6,
                     batch_size=32, client=cluster.client, eval_every=10**9) as job:
        job.fit(seconds=0.5, progress=False)
        runner = threading.Thread(target=job.fit, kwargs={"seconds": seconds + 30, "progress": False})
        runner.start()
        time.sleep(0.3)
        s0, m0, t0 = sum(f.steps for f in job.replicas()), measure(), time.perf_counter()
        time.sleep(seconds)
        s1, m1, t1 = sum(f.steps for f in job.replicas()), measure(), time.perf_counter()
        job.pause()
        runner.join()
    return t1 - t0, m1 - m0, max(1, s1 - s0)


def time_worker_steps(cluster: Cluster, seconds: float = 1.5) -> dict[str, float]:
    """Seconds per step of one replica with no exchange (n_fetch = n_push = 10**5) in a real worker, for
    the models the calibration rig times in a bare process (``dbkit.calibration.rig.RIG_MODELS``)."""
    from .rig import RIG_MODELS

    out = {}
    for model, dataset in RIG_MODELS:
        wall, _, steps = _window(cluster, model, dataset, 1, 100_000, seconds)
        out[model] = wall / steps
    return out


def time_real_steps(cluster: Cluster, model: str = "mlp", dataset: str = "digits", ns: tuple[int, ...] = (1, 16),
                    seconds: float = 1.5, rounds: int = 3) -> dict[int, float]:
    """Seconds per step of one replica of ``model`` exchanging every ``n`` steps (``{n: seconds}``,
    n_fetch = n_push = n, the median of ``rounds`` runs): what ``dbkit calibrate`` fits the rig's costs to."""
    out: dict[int, list[float]] = {n: [] for n in ns}
    for _ in range(rounds):
        for n in out:
            wall, _, steps = _window(cluster, model, dataset, 1, n, seconds)
            out[n].append(wall / steps)
    return {n: float(np.median(v)) for n, v in out.items()}


def time_host_load(cluster: Cluster, seconds: float = 1.5) -> float:
    """Cores' worth of CPU the driver's process (with the LocalCluster's scheduler in it) uses while two
    replicas of the digits MLP train on the workers (n_fetch = n_push = 16): the share of the host's cores
    that the simulated workers cannot have."""
    wall, cpu, _ = _window(cluster, "mlp", "digits", 2, 16, seconds, measure=time.process_time)
    return cpu / wall


def time_control_plane(quick: bool = False
                       ) -> tuple[dict[str, float], dict[str, float], float, dict[str, dict[int, float]]]:
    """``control_seconds``, ``task_seconds`` and ``partition_message_seconds`` (one way) on a LocalCluster,
    ``time_worker_steps`` on it, ``time_host_load``, and ``time_real_steps`` of the digits MLP (n = 1, 16)
    and of the speech preset (n = 1, 16: megabyte messages, BLAS-bound arithmetic)."""
    calls = 30 if quick else 100
    tag = f"calibrate{next(_keys)}-{time.time_ns()}"
    with Cluster(n_workers=2) as cluster:
        first, second = cluster.workers()[:2]
        ps = start_shards(cluster, np.zeros(16, np.float32), 1, "sgd", 1e-6, prefix=f"{tag}-", workers=[second])
        shard = ps.shards[0]
        actor = _median(lambda: shard.vectors("dot", "params", "params").result(), calls)
        task = _median(lambda: cluster.submit_on(second, _nothing, key=f"{tag}-t{time.perf_counter_ns()}").result(),
                       calls)
        peer = cluster.submit_on(first, _peer_calls, str(shard.key), second, calls, key=f"{tag}-peer").result()
        ps.close()
        cluster.registry.release(f"{tag}-0")
        steps = time_worker_steps(cluster, 0.8 if quick else 1.5)
        load = time_host_load(cluster, 0.8 if quick else 1.5)
        window, rounds = (0.8, 1) if quick else (1.5, 3)
        real = {"mlp": time_real_steps(cluster, "mlp", "digits", (1, 16), window, rounds),
                "speech": time_real_steps(cluster, "speech", "speech", (1, 16), window, rounds)}
    control = {"control_seconds": actor / 2, "task_seconds": task / 2, "partition_message_seconds": peer / 2}
    return control, steps, load, real
