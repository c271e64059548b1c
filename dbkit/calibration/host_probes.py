"""What a partition's worker on a host computes and sends, measured there: the emulated profile's arithmetic
rates and boundary message (``dbkit.emulate.profile.HostProbes``; DistBelief Sec. 3, Fig. 3).

A partition computes in a task thread of its host's Dask worker, with the worker's BLAS, and sends its
boundary slices over the partition wire. A bare process's probe (``dbkit.emulate.profile.gradient_seconds``)
times neither: it misses what the worker's other threads take from the host's share, and the base profile's
partition message is a Dask actor call on loopback, not a wire frame between two hosts. So both are timed
where a partition runs:

- the dense and the local probe networks' gradients (batch 32), each in a task on the first worker, and the
  same with a part of their first layer (``-small``: about what one of 8 partitions computes) on every worker
  at once, as a replica's partitions compute, for how much faster a smaller working set runs (alone on the
  machine a small part kept its caches and ran twice as fast per flop; beside 7 others, far less);
- one hop of a boundary message: a tiny 8-8-2 network split over the first two workers (``time_partitioned_step``,
  the path a partitioned replica takes), its step less its busiest partition's arithmetic and less the same
  network's step in one partition, over the six one-way messages on its critical path (partition 0's order to
  go, the activations, the logits, their gradient, the activations' gradient, and the partner's "done");
- what a step does beyond its arithmetic with no partner at all: the tiny network's step in one partition
  (the thread hops into each layer's arithmetic, the loss, the step's own bookkeeping), and the dense probe
  network's in one partition less its arithmetic (the same, and its 2.1 million parameters' gradient written
  into the partition's vector);
- what a boundary's bytes cost: the bulk probe (8-16384-2, a mebibyte each way between two partitions, little
  arithmetic) in two partitions on the first two workers beyond its arithmetic, less the same in one partition
  (on a quarter-core host a fast link's bytes cost far more in copies and system calls than on the wire);
- what an array of 32 MiB or more made each step costs beyond writing it (its pages faulted in and zeroed:
  the C library maps it from the kernel each time), in a task on the first worker;
- what a message costs in a step that keeps its host busy: the thin probe (8-128x4-8, ten 8 KiB messages a
  step) the same way (the 8-8-2 network's host is mostly idle, and its messages run at nearly full speed).
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from ..emulate.profile import LINK_LATENCY, HostProbes, probe_network, probe_seconds
from ..runtime.sim.profile import FRESH_BYTES

if TYPE_CHECKING:
    from ..nn import Network
    from ..runtime.dask.cluster import Cluster

#: one-way messages on the critical path of the hop probe's partitioned step (see the module's docstring)
HOPS = 6


def _probe_task(side: Any, model: str, reps: int) -> float:
    return probe_seconds(model, reps)


def worker_gradient_seconds(cluster: Cluster, worker: str, model: str, reps: int = 5, rounds: int = 3) -> float:
    """Seconds of one gradient of ``probe_network(model)`` (batch 32, one BLAS thread) in a task on ``worker``:
    the median of ``rounds`` tasks of ``reps`` gradients each."""
    return statistics.median(
        cluster.submit_on(worker, _probe_task, model, reps, key=f"host-probe-{model}-{i}").result()
        for i in range(rounds))


def every_worker_gradient_seconds(cluster: Cluster, model: str, reps: int = 5, rounds: int = 3) -> float:
    """Seconds of one gradient of ``probe_network(model)`` with every worker computing one at the same time, as
    a replica's partitions all do at once: the median over workers and ``rounds`` (each host's caches are
    shared with the hosts beside it on the machine's cores, so a part that fits them alone may not)."""
    workers = cluster.workers()
    seconds = []
    for i in range(rounds):
        futures = [cluster.submit_on(w, _probe_task, model, reps, key=f"host-probe-{model}-all-{i}-{n}")
                   for n, w in enumerate(workers)]
        seconds += [f.result() for f in futures]
    return statistics.median(seconds)


def fresh_bytes_seconds(nbytes: int = 2 * FRESH_BYTES, reps: int = 5) -> float:
    """Seconds a byte of an array of ``nbytes`` (at least ``FRESH_BYTES``) made anew costs beyond writing it
    into one already made (``ComputeSpec.fresh_seconds_per_byte``): the medians of ``reps`` of each."""
    import time

    import numpy as np

    if nbytes < FRESH_BYTES:
        raise ValueError(f"nbytes must be at least FRESH_BYTES ({FRESH_BYTES:,}), got {nbytes:,}")
    kept = np.empty(nbytes, dtype=np.uint8)
    kept.fill(1)
    fresh, reused = [], []
    for _ in range(reps):
        began = time.perf_counter()
        made = np.empty(nbytes, dtype=np.uint8)
        made.fill(1)
        fresh.append(time.perf_counter() - began)
        del made
        began = time.perf_counter()
        kept.fill(1)
        reused.append(time.perf_counter() - began)
    return max(0.0, statistics.median(fresh) - statistics.median(reused)) / nbytes


def _fresh_task(side: Any) -> float:
    return fresh_bytes_seconds()


def tiny_network() -> Network:
    """The hop probe's network: 8-8-2, next to no arithmetic."""
    from ..nn import Dense, Network, ReLU

    return Network([Dense(8, 8), ReLU(8), Dense(8, 2)], name="hop probe")


def hop_seconds(cluster: Cluster, steps: int = 60, rounds: int = 3) -> tuple[float, float]:
    """One boundary message's one-way seconds between the first two workers' partitions (see the module's
    docstring), bytes, arithmetic and a one-partition step's own work aside, and never less than the link's
    latency; and that one-partition step's seconds (``HostProbes.step_rest_seconds``): each the median of
    ``rounds`` measurements of ``steps`` steps (a quarter-core host's hop varied 0.2-1.3 ms from one to the
    next)."""
    from .timing import time_partitioned_step

    hops, alone = [], []
    for _ in range(rounds):
        step = time_partitioned_step(cluster, tiny_network(), 2, steps)
        assert step.rest_ms is not None
        alone.append(step.k1_ms / 1e3)
        hops.append(max(LINK_LATENCY, (step.rest_ms - step.k1_ms) / 1e3 / HOPS))  # never below the wire's own
    return statistics.median(hops), statistics.median(alone)


def rest_seconds(cluster: Cluster, network: Network, steps: int = 10, rounds: int = 3) -> float:
    """Seconds of ``network``'s step in one partition on the first worker beyond its arithmetic (the median of
    ``rounds`` measurements of ``steps`` steps)."""
    from .timing import time_partitioned_step

    rests = []
    for _ in range(rounds):
        step = time_partitioned_step(cluster, network, 1, steps)
        assert step.rest_ms is not None
        rests.append(step.rest_ms / 1e3)
    return statistics.median(rests)


def exchange_seconds(cluster: Cluster, model: str, steps: int = 10, rounds: int = 3, k: int = 2) -> float:
    """Seconds ``probe_network(model)``'s step in ``k`` partitions takes beyond its busiest partition's
    arithmetic, less its step in one partition beyond its arithmetic (``HostProbes.bulk_exchange_seconds``,
    ``thin_exchange_seconds``, ``thin4_exchange_seconds``): the median of ``rounds`` measurements of ``steps``
    steps each."""
    from .timing import time_partitioned_step

    network, out = probe_network(model), []
    for _ in range(rounds):
        two, one = (time_partitioned_step(cluster, network, kk, steps) for kk in (k, 1))
        assert two.rest_ms is not None and one.rest_ms is not None
        out.append(max(0.0, two.rest_ms - one.rest_ms) / 1e3)
    return max(statistics.median(out), 1e-6)


def measure(cluster: Cluster, reps: int = 5, rounds: int = 3) -> HostProbes:
    """``HostProbes`` measured on ``cluster``'s first worker (arithmetic, a step's own work), its first two (the
    hop, the bulk and thin probes' exchanges) and, where it has four, its first four (the thin probe's in
    four)."""
    workers = cluster.workers()
    if len(workers) < 2:
        raise ValueError(f"the host probes need two workers (a hop crosses between them), got {len(workers)}")

    def timed(model: str, n: int) -> float:
        return worker_gradient_seconds(cluster, workers[0], model, n, rounds)

    hop, alone = hop_seconds(cluster, rounds=rounds)
    return HostProbes(timed("dense", reps), timed("local", max(1, reps // 2)), hop,
                      dense_small_seconds=every_worker_gradient_seconds(cluster, "dense-small", 4 * reps, rounds),
                      local_small_seconds=every_worker_gradient_seconds(cluster, "local-small", 4 * reps, rounds),
                      step_rest_seconds=alone,
                      dense_rest_seconds=rest_seconds(cluster, probe_network("dense"), 2 * reps, rounds),
                      bulk_exchange_seconds=exchange_seconds(cluster, "bulk", 2 * reps, rounds),
                      thin_exchange_seconds=exchange_seconds(cluster, "thin", 4 * reps, rounds),
                      thin4_exchange_seconds=(exchange_seconds(cluster, "thin", 4 * reps, rounds, k=4)
                                              if len(workers) >= 4 else None),
                      fresh_seconds_per_byte=statistics.median(
                          cluster.submit_on(workers[0], _fresh_task, key=f"host-probe-fresh-{i}").result()
                          for i in range(rounds)))
