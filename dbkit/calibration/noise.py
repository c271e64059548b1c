"""Whether this machine is steady enough to calibrate: the same small computation timed before and after
``dbkit calibrate`` measures, its spread and its drift.

A profile is only as good as the timings behind it. On a busy machine (other
jobs, a laptop's power saving) the same gradient takes twice as long one
moment as the next, and every rate fitted from such timings is off by as much:
a calibration at a load of 10 wrote a profile 57x off, silently. So a fixed
probe (the digits MLP's gradient at batch 32, one BLAS thread) runs for about
half a second before the measurements and again after them; the spread of its
times (90th over 10th percentile), the drift of its median between the two,
and the share of the time it had the CPU (other processes wanting the cores
take the rest) say how far any measured number may be off. The machine's load average is
reported beside them but not judged: it lags by a minute and counts what has
already ended.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SPREAD = 0.5
"""A probe whose 90th-percentile time is more than this fraction above its 10th percentile is too noisy."""

DRIFT = 0.25
"""A probe whose median moved more than this fraction between before and after is too noisy."""

CPU_SHARE = 0.8
"""A probe that had the CPU for less than this fraction of the wall-clock time shared the machine with others."""


def probe_workload() -> Callable[[], Any]:
    """The probe's computation: the digits MLP's loss and gradient at batch 32."""
    from ..data import load
    from ..nn import build

    data = load("digits")
    net = build("mlp", data.n_features, data.n_classes, l2=1e-4)
    params, X, y = net.init_params(0), data.X_train[:32], data.y_train[:32]
    return lambda: net.loss_and_grad(params, X, y)


@dataclass(frozen=True)
class Probe:
    """Seconds of each run of the probe's work, and the share of the wall-clock time this process had the
    CPU meanwhile (about 1 on an idle machine; 2 of 7 where six other processes want the 2 cores)."""

    times: list[float]
    cpu_share: float


def probe(work: Callable[[], Any] | None = None, seconds: float = 0.5) -> Probe:
    """``work`` (default: ``probe_workload()``) run over and over for about ``seconds``: a ``Probe``."""
    work = work or probe_workload()
    work()
    times: list[float] = []
    wall0, cpu0 = time.perf_counter(), time.process_time()
    end = wall0 + seconds
    while time.perf_counter() < end or len(times) < 20:
        t = time.perf_counter()
        work()
        times.append(time.perf_counter() - t)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    return Probe(times, min(1.0, cpu / wall) if wall > 0 else 1.0)


@dataclass(frozen=True)
class Noise:
    """The probe's spread and drift, and the machine's load, around one calibration."""

    spread: float  # the larger of the two probes' (p90 - p10) / p50
    drift: float  # |median after - median before| / median before
    cpu_share: float  # the smaller of the two probes' share of the CPU
    load: float  # the 1-minute load average when it began (-1: unknown)
    cores: int

    @classmethod
    def of(cls, before: Probe, after: Probe, load: float | None = None) -> Noise:
        def spread(times: list[float]) -> float:
            p10, p50, p90 = np.percentile(times, [10, 50, 90])
            return float((p90 - p10) / p50)

        m0, m1 = float(np.median(before.times)), float(np.median(after.times))
        return cls(spread=round(max(spread(before.times), spread(after.times)), 4),
                   drift=round(abs(m1 - m0) / m0, 4), cpu_share=round(min(before.cpu_share, after.cpu_share), 3),
                   load=round(machine_load() if load is None else load, 2), cores=os.cpu_count() or 1)

    def problem(self) -> str | None:
        """Why a profile measured so cannot be trusted, in a phrase; ``None`` if it can."""
        said = []
        if self.spread > SPREAD:
            said.append(f"the same computation's times spread {self.spread:.0%} (at most {SPREAD:.0%})")
        if self.drift > DRIFT:
            said.append(f"its median moved {self.drift:.0%} while it measured (at most {DRIFT:.0%})")
        if self.cpu_share < CPU_SHARE:
            said.append(f"other processes took {1 - self.cpu_share:.0%} of its time (at most {1 - CPU_SHARE:.0%})")
        if not said:
            return None
        load = f"; load {self.load:.1f} on {self.cores} cores" if self.load >= 0 else ""
        return " and ".join(said) + load

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "trusted": self.problem() is None}


def machine_load() -> float:
    """The 1-minute load average (-1 where the system gives none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return -1.0
