"""The calibration rig's costs fitted to real steps of a replica in a Dask worker (``dbkit calibrate``'s last
part). The rig measures each cost in a bare process; a worker adds its own threads and copies. One simulated
replica is run on the rig's profile and its step set beside the real one's: the arithmetic and the
exchanges of the digits MLP each get one scale (``machine.cpu_factor``, ``message.wire_scale``), the speech
preset's BLAS-bound gradient one more (``measured.gradient_factor``) and megabyte messages theirs (the largest
row of ``measured.wire_cpu``; the rig's own stays in ``measured.wire_cpu_rig``).
"""

from __future__ import annotations

import dataclasses
import math

from ..runtime.sim.profile import Profile


def simulated_step(profile: Profile, n: int, steps: int = 400, model: str = "mlp", dataset: str = "digits",
                   cost_only: bool = True) -> float:
    """Simulated seconds per step of one replica of ``model`` with two shards on ``profile``'s cluster,
    exchanging every ``n`` steps (between the evaluations of the run's second half, before its end).
    Cost-only by default: a step's virtual time does not depend on the numbers (the same to the last bit
    with them, ten times sooner; a test checks)."""
    from ..config import RunConfig
    from ..runtime.sim.layout import Cluster
    from ..sim.api import simulated_run
    from ..telemetry import Sample

    cfg = RunConfig.make(algorithm="downpour", model=model, dataset=dataset, replicas=1, shards=2, n_fetch=n,
                         n_push=n, optimizer="sgd", lr=1e-6, batch_size=32, steps=steps, eval_every=max(1, steps // 8))
    run = simulated_run(cfg, Cluster(profile), cost_only=cost_only)
    run.run()
    inside = [s for s in run.events.of(Sample) if steps // 2 <= s.step < steps]  # (the driver polls there)
    if len(inside) < 2:
        raise RuntimeError(f"too few evaluations in {steps} simulated steps to time one")
    mid, end = inside[0], inside[-1]
    return (end.t - mid.t) / max(1, end.step - mid.step)


def fit_to_real(profile: Profile, real: dict[int, float]) -> tuple[Profile, dict]:
    """Scale the rig's arithmetic (``machine.cpu_factor``) and exchanges (``message.wire_scale``) so that one
    simulated replica's step takes what a real worker's takes, exchanging every step and every 16th:
    ``t(n) = arithmetic + exchange / n`` solved for both, simulated and real."""
    base = profile.but(machine={"cpu_factor": 1.0}, message={"wire_scale": 1.0})
    sim = {n: simulated_step(base, n) for n in (1, 16)}

    def split(t: dict[int, float]) -> tuple[float, float]:
        exchange = max(0.0, (t[1] - t[16]) * 16 / 15)
        return max(1e-9, t[16] - exchange / 16), exchange

    (c, e), (cr, er) = split(sim), split(real)
    factor = max(0.5, cr / c)
    scale = max(0.1, er / (factor * e)) if e > 0 else 1.0
    fitted = profile.but(machine={"cpu_factor": factor}, message={"wire_scale": scale})
    return fitted, {"real": {str(n): t for n, t in real.items()},
                    "simulated_unscaled": {str(n): t for n, t in sim.items()}}


def fit_large_messages(profile: Profile, real_step: float, model: str = "speech", dataset: str = "speech",
                       steps: int = 100) -> tuple[Profile, float]:
    """Scale the message table's largest row (megabytes: the rig's copies there are not the worker's) so that
    one simulated replica of ``model`` exchanging every step steps as fast as the real one (bisection on
    the scale, in log space: a step's time grows with it)."""
    table = [list(row) for row in profile.measured["wire_cpu"]]
    last = table[-1]

    def with_scale(scale: float) -> Profile:
        scaled = [*table[:-1], [last[0], *(c * scale for c in last[1:])]]
        return dataclasses.replace(profile, measured={**profile.measured, "wire_cpu": scaled})

    lo, hi = math.log(0.01), math.log(10.0)
    for _ in range(9):
        mid = (lo + hi) / 2
        if simulated_step(with_scale(math.exp(mid)), 1, steps, model, dataset) > real_step:
            hi = mid
        else:
            lo = mid
    scale = math.exp((lo + hi) / 2)
    return with_scale(scale), scale


def fit_to_real_steps(profile: Profile, real_steps: dict[str, dict[int, float]]) -> Profile:
    """``profile`` fitted to ``real_steps`` (``{"mlp": {1: s, 16: s}, "speech": {1: s, 16: s}}``, seconds per
    real step exchanging every n steps); what was fitted is in its ``measured["fit"]``."""
    profile, fit = fit_to_real(profile, real_steps["mlp"])
    extra: dict = {}
    if "speech" in real_steps:
        real = real_steps["speech"]
        key = next(k for k in profile.measured["gradients"] if k.startswith("speech:"))
        extra["wire_cpu_rig"] = [list(row) for row in profile.measured["wire_cpu"]]
        factor, scale = 1.0, 1.0
        for _ in range(2):  # the arithmetic from the 16-step exchange, then the messages from every step
            trial = dataclasses.replace(profile, measured={**profile.measured, "gradient_factor": {key: 1.0}})
            factor = max(0.2, real[16] / simulated_step(trial, 16, 100, "speech", "speech"))
            trial = dataclasses.replace(profile, measured={**profile.measured, "gradient_factor": {key: factor}})
            profile, step = fit_large_messages(trial, real[1])
            scale *= step
        fit.update(speech_real={str(n): t for n, t in real.items()}, large_message_scale=scale,
                   speech_gradient_factor=factor)
    return dataclasses.replace(profile, measured={**profile.measured, **extra, "fit": fit})
