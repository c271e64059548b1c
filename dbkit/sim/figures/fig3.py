"""Fig. 3, simulated: the speed-up of one model's training step against the machines it is split over.

Cost-only (``partitioned_step``): the paper's four models by shape (``ModelShape.named``), each step's
arithmetic and boundary traffic on ``profile``'s machines (default ``distbelief-2012``).
"""

from __future__ import annotations

import time

from ...runtime.sim.partitioned_step import partitioned_step
from ...runtime.sim.profile import Profile, load
from ...runtime.sim.profile_ranges import MAX_MACHINES
from ...runtime.sim.shape import ModelShape
from . import paper

MODELS = ("speech-42m", "image-80m", "image-330m", "image-1.7b")
MACHINES = (1, 2, 4, 8, 16, 32, 64, 81, 128)


#: the largest mini-batch a figure is costed for (the paper's were in the hundreds)
MAX_BATCH = 1_000_000


def figure3(profile: Profile | str = "distbelief-2012", machines: tuple[int, ...] = MACHINES, batch: int = 128,
            models: tuple[str, ...] = MODELS) -> dict:
    """The Fig. 3 report: per model its parameters, connectivity, and speed-up at each machine count.

    Parameters
    ----------
    profile
        The simulated cluster's numbers (a ``Profile``, a name or a path).
    machines
        Machine counts per model (1 is the reference).
    batch
        Examples per mini-batch step.
    """
    began = time.perf_counter()
    spec = load(profile)
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be a whole number in [1, {MAX_BATCH:,}], got {batch!r}")
    counts = sorted(set(int(k) for k in machines) | {1})
    if not all(1 <= k <= MAX_MACHINES for k in counts):
        raise ValueError(f"machines must be in [1, {MAX_MACHINES:,}], got {list(machines)}")
    out: dict[str, dict] = {}
    for name in models:
        shape = ModelShape.named(name)
        steps = [partitioned_step(spec, shape, k, batch) for k in counts]
        one = steps[0].seconds
        local = any(layer.kind == "local" for layer in shape.layers)
        out[name] = {"parameters": shape.parameters, "connectivity": "local" if local else "dense",
                     "machines": counts, "speedup": [one / s.seconds for s in steps],
                     "step_seconds": [s.seconds for s in steps], "exchange_seconds": [s.exchange for s in steps]}
    return {"figure": "fig3", "simulated": True, "profile": spec.name, "profile_description": spec.description,
            "batch": batch, "models": out, "paper": paper.FIG3, "differences": differences(out),
            "real_seconds": time.perf_counter() - began}


def differences(models: dict[str, dict]) -> list[str]:
    """Where the simulated curves' shapes differ from what the paper states, and why."""
    notes = []
    speech = models.get("speech-42m")
    if speech:
        best = max(range(len(speech["speedup"])), key=lambda i: speech["speedup"][i])
        k, s = speech["machines"][best], speech["speedup"][best]
        if not (1.5 <= s <= 3.0 and 4 <= k <= 16):
            notes.append(f"the speech model peaks at {s:.1f}x on {k} machines, not about 2.2x on 8: its fully "
                         "connected layers' all-to-all traffic grows with the machines while each one's arithmetic "
                         "shrinks; where they cross depends on the profile's network and per-message costs")
    big = models.get("image-1.7b")
    if big and 81 in big["machines"]:
        s = big["speedup"][big["machines"].index(81)]
        if s > 20:
            notes.append(f"the 1.7B-parameter model gains {s:.0f}x at 81 machines, more than the paper's 'more than "
                         "12x': the simulation splits arithmetic perfectly and charges only boundary bytes and "
                         "per-message costs, while real machines also lose time to uneven partitions, stragglers "
                         "and the runtime")
    return notes
