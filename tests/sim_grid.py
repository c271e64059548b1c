"""The simulated test grid whose reports a faster simulator must give unchanged.

``python -m tests.sim_grid --write`` records them (``tests/data/sim_grid.json``, their events in
``sim_grid_events.json.gz``); ``test_sim_grid.py`` runs the grid again and compares. A change that is meant
to change simulated results (a cost model corrected, say) records them again and says why in its commit; a
change meant only to make the simulator faster must leave them alone.

Unchanged means: every count, name and state the same, and every float (virtual instants among them) within
``REL`` of the one recorded. The tolerance is for the arithmetic alone: the losses and gradient norms are
float32 sums, and another processor's BLAS kernels round them differently in the last bit or two (a report
recorded on an Intel machine and run on an AMD one differed by at most 1.3e-7 relative, in losses only).
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run

RECORD = Path(__file__).parent / "data" / "sim_grid.json"
EVENTS = Path(__file__).parent / "data" / "sim_grid_events.json.gz"

#: how far (relative) a recorded float may move: float32 rounding on another processor, not a changed timing
REL = 1e-6

#: name -> (profile, shape, cost_only, RunConfig settings)
GRID: dict[str, tuple[str, str | None, bool, dict]] = {
    "downpour-n1-here": ("here", None, False, dict(algorithm="downpour", model="mlp", replicas=4, shards=2,
                                                   steps=240, eval_every=80)),
    "downpour-n4-here": ("here", None, False, dict(algorithm="downpour", model="mlp", replicas=4, shards=2,
                                                   n_fetch=4, n_push=4, steps=240, eval_every=80)),
    "downpour-20-shared-host": ("here", None, False, dict(algorithm="downpour", model="mlp", replicas=20,
                                                          shards=4, steps=400, eval_every=200)),
    "downpour-n1-paper": ("distbelief-2012", None, False, dict(algorithm="downpour", model="mlp", replicas=8,
                                                               shards=4, steps=240, eval_every=120)),
    "downpour-straggler-sgd": ("here", None, False, dict(algorithm="downpour", model="linear", replicas=3,
                                                         shards=2, optimizer="sgd", slow_replicas=((0, 3.0),),
                                                         steps=150, eval_every=50)),
    "sandblaster-stragglers": ("here", None, False, dict(algorithm="sandblaster", model="linear", replicas=4,
                                                         shards=2, l2=1e-3, slow_replicas=((1, 3.0),),
                                                         iterations=4, steps=4, eval_every=1)),
    "partitioned-image-local": ("here", None, False, dict(algorithm="downpour", model="image-local",
                                                          dataset="digits", replicas=2, shards=2, partitions=2,
                                                          steps=60, eval_every=30)),
    "cost-only-speech-saturated": ("distbelief-2012", "speech-42m", True, dict(algorithm="downpour", replicas=12,
                                                                             shards=1, steps=48, eval_every=24)),
}

#: what a report says about this machine's effort rather than the simulated run (left out of the comparison)
EFFORT = ("real_seconds", "events", "stacked_gradients")


def fingerprint(report: dict) -> dict:
    """``report`` as written (tuples as lists), without its creation time, host and the simulator's own effort."""
    r = json.loads(json.dumps(report))
    for key in ("created", "host"):
        r.pop(key, None)
    for key in EFFORT:
        r["simulation"].pop(key, None)
    return r


def same(a: object, b: object) -> bool:
    """``a`` and ``b`` agree: the same structure, keys, strings and integers, and floats within ``REL``
    (NaN, a cost-only run's accuracy, equals NaN; an integer never equals a float)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= REL * max(abs(a), abs(b))
    return type(a) is type(b) and a == b


def differences(now: dict, before: dict) -> list[str]:
    """The top-level keys of two fingerprints that differ (see ``same``)."""
    return sorted(k for k in set(now) | set(before) if k not in now or k not in before or not same(now[k], before[k]))


def recorded() -> dict[str, dict]:
    """The grid's fingerprints as recorded, each with its events."""
    record, events = json.loads(RECORD.read_text()), json.loads(gzip.decompress(EVENTS.read_bytes()))
    return {name: {**r, "events": events[name]} for name, r in record.items()}


def write(fingerprints: dict[str, dict]) -> None:
    """Record ``fingerprints``: the readable part in ``RECORD``, the events (a megabyte) in ``EVENTS``."""
    RECORD.write_text(json.dumps({n: {k: v for k, v in f.items() if k != "events"} for n, f in fingerprints.items()},
                                 indent=1, sort_keys=True) + "\n")
    EVENTS.write_bytes(gzip.compress(json.dumps({n: f["events"] for n, f in fingerprints.items()},
                                                sort_keys=True).encode(), mtime=0))


def run_case(name: str) -> dict:
    profile, shape, cost_only, settings = GRID[name]
    config = RunConfig.make(**settings)
    return fingerprint(simulated_run(config, Cluster(profile), shape=shape, cost_only=cost_only).run())


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python -m tests.sim_grid --write   (records the grid's reports)")
    write({name: run_case(name) for name in GRID})
    print(f"recorded {len(GRID)} reports in {RECORD} and {EVENTS}")
