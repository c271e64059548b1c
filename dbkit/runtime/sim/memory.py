"""Whether a simulation with numerics fits in this machine's memory, said before anything is allocated.

With numerics every simulated replica holds its own copies of the parameters
(its parameters, accrued gradient, the push under way, a fresh gradient) and
the shards hold theirs (parameters, Adagrad's accumulators, scratch; for
Sandblaster the L-BFGS history too). Cost-only mode holds none of them.
"""

from __future__ import annotations

import os

FLOAT = 4


def available_bytes() -> int:
    """Memory this process could still use: ``MemAvailable`` (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def numerics_bytes(parameters: int, replicas: int, algorithm: str, memory: int = 10) -> int:
    """Bytes a simulation with numerics needs for ``replicas`` replicas of ``parameters`` parameters."""
    if algorithm == "sandblaster":  # shards: params, grad, acc, trial, direction, scratch, 2 per history pair
        copies = 3 * replicas + 7 + 2 * memory
    else:  # each replica 4 copies; the shards 5 (params, accumulators, two scratch, landing)
        copies = 4 * replicas + 5
    return FLOAT * parameters * copies


def check_memory(parameters: int, replicas: int, algorithm: str, memory: int = 10,
                 available: int | None = None) -> None:
    """``ValueError`` saying the size needed and to use ``--cost-only`` when the numerics would not fit."""
    need = numerics_bytes(parameters, replicas, algorithm, memory)
    have = available_bytes() if available is None else available
    if need > 0.8 * have:
        raise ValueError(f"a simulation with numerics of {parameters:,} parameters and {replicas} replicas would "
                         f"need {need / 2**30:,.1f} GiB (each replica and shard holds its own copies); this machine "
                         f"has {have / 2**30:,.1f} GiB available. Use --cost-only (time and bytes from the model's "
                         "shape, no arrays) or fewer replicas")
