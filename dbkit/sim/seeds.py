"""One simulated setting over several seeds, each with jittered computation times: the spread of its figures.

A single simulated run gives one number; a researcher comparing settings needs
to know how much that number moves. ``over_seeds`` runs the same config with
seeds ``seed, seed + 1, ...``, each on a cluster whose computations take a time
drawn around the modelled one (``jitter="exponential"``: stragglers happen), and
gives each figure's mean, standard deviation, least and greatest.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import RunConfig
from ..runtime.sim.layout import Cluster
from .api import simulated_run

#: the figures whose spread is given: name -> how to read it off a report (``None``: not known there)
FIGURES: dict[str, Callable[[dict], float | None]] = {
    "examples_per_second": lambda r: r["examples_per_second"],
    "virtual_seconds": lambda r: r["wall_seconds"],
    "test_accuracy": lambda r: r["final"].get("test_accuracy") if not r.get("cost_only") else None,
}


@dataclass(frozen=True)
class Spread:
    """One figure over the seeds."""

    mean: float
    sd: float
    low: float
    high: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, min(values),
                   max(values), tuple(values))

    def describe(self, digits: int = 0) -> str:
        return f"{self.mean:.{digits}f} +- {self.sd:.{digits}f} ({self.low:.{digits}f} to {self.high:.{digits}f})"


def over_seeds(config: RunConfig, cluster: Cluster, seeds: int, say: Callable[[str], None] = lambda line: None,
               **options: Any) -> dict:
    """The report of ``config`` at its own seed, with ``"seeds"``: every run's seed and figures and each
    figure's ``Spread`` over ``seeds`` runs (jittered computation times); ``options`` as ``simulated_run``'s.
    ``say`` is told as each run begins."""
    if seeds < 2:
        raise ValueError(f"seeds must be at least 2 to give a spread, got {seeds}")
    jittered = dataclasses.replace(cluster, jitter="exponential")
    reports: list[dict] = []
    for k in range(seeds):
        seed = config.seed + k
        say(f"seed {seed} ({k + 1} of {seeds})")
        run = simulated_run(config.replace(seed=seed), jittered, **options)
        try:
            reports.append(run.run())
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the runs so far, this one as far as it went
            reports.append({**run.report(), "interrupted": True, "signal": getattr(e, "signal_name", "SIGINT")})
            break
    whole = [r for r in reports if not r.get("interrupted")]
    rows = [{"seed": r["config"]["seed"], **{name: read(r) for name, read in FIGURES.items()}} for r in whole]
    spreads = {name: dataclasses.asdict(Spread.of([row[name] for row in rows]))
               for name in FIGURES if len(rows) > 1 and all(row[name] is not None for row in rows)}
    stopped = {k: reports[-1][k] for k in ("interrupted", "signal") if k in reports[-1]}
    sweep = {"count": len(rows), "asked": seeds, "jitter": "exponential", "runs": rows, "spread": spreads}
    return {**reports[0], **stopped, "seeds": sweep}
