"""The simulated test grid whose reports a faster simulator must give unchanged, bit for bit.

``python -m tests.sim_grid --write`` records them (``tests/data/sim_grid.json``); ``test_sim_grid.py``
runs the grid again and compares. A change that is meant to change simulated results (a cost model
corrected, say) records them again and says why in its commit; a change meant only to make the
simulator faster must leave them alone.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from dbkit.config import RunConfig
from dbkit.sim import Cluster, simulated_run

RECORD = Path(__file__).parent / "data" / "sim_grid.json"

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
    """``report`` without its creation time, host and the simulator's own effort; its events as a hash."""
    r = json.loads(json.dumps(report))  # (as written: tuples become lists)
    for key in ("created", "host"):
        r.pop(key, None)
    for key in EFFORT:
        r["simulation"].pop(key, None)
    events = r.pop("events")
    r["events_sha256"] = hashlib.sha256(json.dumps(events, sort_keys=True).encode()).hexdigest()
    r["events_count"] = len(events)
    return r


def differences(now: dict, before: dict) -> list[str]:
    """The top-level keys of two fingerprints that differ (NaN, as a cost-only run's accuracy, equals NaN)."""
    same = json.dumps  # (through JSON: NaN is written the same both times)
    return sorted(k for k in set(now) | set(before) if same(now.get(k), sort_keys=True) != same(before.get(k),
                                                                                             sort_keys=True))


def run_case(name: str) -> dict:
    profile, shape, cost_only, settings = GRID[name]
    config = RunConfig.make(**settings)
    return fingerprint(simulated_run(config, Cluster(profile), shape=shape, cost_only=cost_only).run())


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python -m tests.sim_grid --write   (records the grid's reports)")
    RECORD.write_text(json.dumps({name: run_case(name) for name in GRID}, indent=1, sort_keys=True) + "\n")
    print(f"recorded {len(GRID)} reports in {RECORD}")
