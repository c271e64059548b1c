"""What a partitioned step's exchanges cost on an emulated cluster beyond the links' time, fitted so that the
simulator's partitioned step (``dbkit.runtime.sim.partitioned_step``; DistBelief Sec. 3, Fig. 3) charges probe
networks' exchanges what they measured on the hosts (``dbkit.calibration.host_probes``):

- the bulk probe (8-16384-2) in two partitions: two boundary messages of a mebibyte;
- the thin probe (8-128-128-128-128-8) in two partitions: ten exchanges of one 8 KiB message each, and in four
  (where the cluster has four hosts): ten exchanges of three messages each.

Each probe's exchange is its step in K partitions beyond its busiest partition's arithmetic, less its step in one
partition beyond its arithmetic. Three costs at a speed of 1 (times ``cpu_factor`` when charged) are fitted to them
by bounded least squares (none below 0): an exchange's own (``partition_exchange_seconds``: a partition waiting for
its partners is woken when they have all come), a message's (``partition_message_seconds``) and a byte's
(``partition_seconds_per_byte``). Measured in steps that keep their hosts busy, they include the CPU quota's waits:
a quarter-core host runs a quarter of each 10 ms period, so work that finds the quota spent waits for the next. The
8-8-2 hop probe, whose hosts are mostly idle, measures a message at nearly full speed (0.19 ms against 0.17 ms with
no quota, where the thin probe's exchange went from 0.18 ms to 0.9 ms, 2026-12-01).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from ..runtime.sim.partitioned_step import partitioned_step
from ..runtime.sim.profile import Profile
from ..runtime.sim.shape import ModelShape
from .probe_networks import PROBE_BATCH, probe_network

#: the three costs fitted (``MessageSpec``'s fields)
FIELDS = ("partition_exchange_seconds", "partition_message_seconds", "partition_seconds_per_byte")


def _exchange(profile: Profile, model: str, k: int, costs: tuple[float, float, float]) -> float:
    p = profile.but(message=dict(zip(FIELDS, costs)))
    return partitioned_step(p, ModelShape.of(probe_network(model)), k, PROBE_BATCH, bands=True,
                            update=False).exchange


#: the size of each cost (an exchange's and a message's seconds, a byte's) for the fit's scaling and start
SCALES = np.array([1e-4, 1e-4, 1e-9])


def fit_exchange(profile: Profile, measured: dict[tuple[str, int], float], comments: dict[str, str]) -> Profile:
    """``profile`` with the three costs (``FIELDS``) fitted, never below 0, to ``measured``: seconds of the
    exchange of ``probe_network(model)`` in ``k`` partitions, keyed ``(model, k)``; with fewer probes than
    costs, the exchange's own cost is 0 and, with the bulk probe alone, the message's is the base's (the hop's).
    ``comments`` gets what each rests on."""
    if ("bulk", 2) not in measured:
        raise ValueError("the exchange fit needs the bulk probe's exchange in two partitions")
    free = [0, 1, 2] if len(measured) >= 3 else [1, 2] if len(measured) == 2 else [2]
    costs = np.zeros(3)
    if free == [2]:
        costs[1] = profile.message.partition_message_seconds
    keys, target = list(measured), np.array(list(measured.values()))

    def residuals(u: np.ndarray) -> np.ndarray:
        c = costs.copy()
        c[free] = u * SCALES[free]
        three = (float(c[0]), float(c[1]), float(c[2]))
        return np.array([_exchange(profile, model, k, three) for model, k in keys]) / target - 1

    # with a link's token bucket an exchange is not linear in the costs (a step that computes longer gives the
    # bucket more time to fill, and a link-bound one hides them): a bounded least-squares search from costs of
    # the usual size, not a linear solve
    found = least_squares(residuals, np.ones(len(free)), bounds=(0.0, np.inf), x_scale=1.0, xtol=1e-12,
                          ftol=1e-12, gtol=1e-12)
    costs[free] = found.x * SCALES[free]
    charged = [f"{model} in {k}: {seconds * 1e3:.2f} ms measured, "
               f"{_exchange(profile, model, k, (0.0, 0.0, 0.0)) * 1e3:.2f} ms of it the links'"
               for (model, k), seconds in measured.items()]
    said = "; ".join(charged)
    for name, value in zip(FIELDS, costs):
        if FIELDS.index(name) in free:
            comments[f"message.{name}"] = (
                f"{value * 1e9:.3g} ns at a speed of 1, fitted (bounded least squares with "
                f"{', '.join(FIELDS[i] for i in free if FIELDS[i] != name) or 'nothing else'}) to the probes' "
                f"exchanges beyond their arithmetic, less the same in one partition ({said})")
    return profile.but(message=dict(zip(FIELDS, (float(c) for c in costs))))
