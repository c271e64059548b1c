"""What a partition's worker on a host computes and sends, measured there: the emulated profile's arithmetic
rates and boundary message (``dbkit.emulate.profile.HostProbes``; DistBelief Sec. 3, Fig. 3).

A partition computes in a task thread of its host's Dask worker, with the worker's BLAS, and sends its
boundary slices over the partition wire. A bare process's probe (``dbkit.emulate.profile.gradient_seconds``)
times neither: it misses what the worker's other threads take from the host's share, and the base profile's
partition message is a Dask actor call on loopback, not a wire frame between two hosts. So both are timed
where a partition runs:

- the dense and the local probe networks' gradients (batch 32), each in a task on the first worker;
- one hop of a boundary message: a tiny 8-8-2 network split over the first two workers (``time_partitioned_step``,
  the path a partitioned replica takes), its step less its busiest partition's arithmetic, over the six
  one-way messages on its critical path (partition 0's order to go, the activations, the logits, their
  gradient, the activations' gradient, and the partner's "done").
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from ..emulate.profile import LINK_LATENCY, HostProbes, probe_seconds

if TYPE_CHECKING:
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


def hop_seconds(cluster: Cluster, steps: int = 60, rounds: int = 3) -> float:
    """One boundary message's one-way seconds between the first two workers' partitions (see the module's
    docstring), bytes and arithmetic aside, and never less than the link's latency: the median of ``rounds``
    measurements of ``steps`` steps (a quarter-core host's hop varied 0.2-1.3 ms from one to the next)."""
    from ..nn import Dense, Network, ReLU
    from .timing import time_partitioned_step

    tiny = Network([Dense(8, 8), ReLU(8), Dense(8, 2)], name="hop probe")
    hops = []
    for _ in range(rounds):
        step = time_partitioned_step(cluster, tiny, 2, steps)
        assert step.compute_ms is not None
        hops.append(max(LINK_LATENCY, (step.step_ms - step.compute_ms) / 1e3 / HOPS))  # never below the wire's own
    return statistics.median(hops)


def measure(cluster: Cluster, reps: int = 5, rounds: int = 3) -> HostProbes:
    """``HostProbes`` measured on ``cluster``'s first worker (arithmetic) and its first two (the hop)."""
    workers = cluster.workers()
    if len(workers) < 2:
        raise ValueError(f"the host probes need two workers (a hop crosses between them), got {len(workers)}")
    dense = worker_gradient_seconds(cluster, workers[0], "dense", reps, rounds)
    local = worker_gradient_seconds(cluster, workers[0], "local", max(1, reps // 2), rounds)
    return HostProbes(dense, local, hop_seconds(cluster, rounds=rounds))
