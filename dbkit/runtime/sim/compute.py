"""Arithmetic in virtual time: a network whose gradient also holds a core for the modelled seconds.

A simulated replica is given ``TimedNetwork(network, ...)`` instead of the
network: every ``loss_and_grad`` computes the real loss and gradient, then
holds a core of the replica's machine for the time the cost model gives
(times ``slow``, for a straggler). So the replica's code is unchanged and its
steps take virtual time where they take real time on a cluster. Given a
``GradientBatch``, the gradient is computed when the hold ends, in one stack
with every other gradient asked for by then (the same numbers, bit for bit).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...nn import Network
from .cost import CostModel
from .engine import Simulation
from .gradient_batch import GradientBatch
from .machines import Machine


class TimedNetwork:
    """``network`` as seen by one simulated replica (or partition) on ``machine``.

    ``update_floats`` is how many parameters the replica's own per-step vector
    work covers (its accrue and local step); ``threads`` how many cores one
    gradient is split across; ``jitter`` (``"exponential"``) draws each
    computation's time around its mean from ``rng`` instead of taking the mean; ``batch`` (a
    ``GradientBatch``) defers each gradient's arithmetic to the end of its hold, to compute it in a stack.
    """

    def __init__(self, network: Network, sim: Simulation, machine: Machine, cost: CostModel, update_floats: int = 0,
                 threads: int = 1, fraction: float = 1.0, jitter: str = "none",
                 rng: np.random.Generator | None = None, batch: GradientBatch | None = None) -> None:
        self.network, self.sim, self.machine, self.cost = network, sim, machine, cost
        self.batch = batch
        self.threads = max(1, min(int(threads), machine.cores.n))  # no more than the machine has
        self.fraction = float(fraction)
        self.per_step = cost.update_seconds(update_floats) if update_floats else 0.0  # a Downpour replica's own work
        self.jitter, self.rng = jitter, rng
        self.slow = 1.0
        self.seconds = 0.0  # virtual seconds of arithmetic so far
        self._parts: dict[int, tuple[float, float]] = {}  # ``gradient_parts`` by batch size

    def __getattr__(self, name: str) -> Any:
        return getattr(self.network, name)

    def loss_and_grad(self, params: np.ndarray, X: np.ndarray, y: np.ndarray,
                      with_penalty: bool = True) -> tuple[float, np.ndarray]:
        parts = self._parts.get(len(y))
        if parts is None:  # the same few batch sizes every step
            parts = self._parts[len(y)] = self.cost.gradient_parts(len(y), self.fraction)
        serial, parallel = parts
        if self.batch is None:
            out = self.network.loss_and_grad(params, X, y, with_penalty)
            self.hold(parallel + self.per_step, serial)
            return out
        ticket = self.batch.ask(self.network, params, X, y, with_penalty)
        self.hold(parallel + self.per_step, serial)
        return ticket.result()

    def penalty_grad(self, params: np.ndarray) -> np.ndarray:
        out = self.network.penalty_grad(params)
        self.hold(self.cost.update_seconds(params.size))
        return out

    def hold(self, seconds: float, serial: float = 0.0) -> None:
        """Hold ``threads`` cores for ``seconds`` of work split across them after ``serial`` seconds that
        only one of them can do (the others wait: a fork and join), all times ``slow``, in virtual time."""
        scale = self.slow * (1.0 + self.cost.profile.compute.contention * max(0, self.machine.replicas - 1))
        if self.jitter == "exponential" and self.rng is not None:
            scale *= float(self.rng.exponential())
        seconds, serial = seconds * scale, serial * scale
        self.seconds += serial + seconds
        if seconds > 0 or serial > 0:
            self.sim.sleep_until(self.machine.compute(self.sim.now, seconds + serial * self.threads, self.threads))
