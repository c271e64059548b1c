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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...nn import Network
from .cost import CostModel
from .engine import Simulation
from .machines import Machine

# Gradients due in the same stretch of virtual time, computed as one stack.
#
# A simulated replica's gradient holds a core of its machine for the modelled
# seconds (``TimedNetwork.hold``); its result is needed only when the hold ends.
# So its arithmetic can wait until then, and every gradient asked for in the
# meantime (other replicas', holding their own machines) be computed with it in
# one call of ``Network.loss_and_grad_stacked``: the same numbers, bit for bit,
# with numpy's per-call cost paid once per stack instead of once per gradient.
# Nothing else changes: the inputs are the replica's own arrays, which nobody
# writes while it waits, and each result is handed back to the replica that
# asked for it, in virtual time as before.

@dataclass
class Ticket:
    """One replica's gradient, asked for and not yet taken: its inputs, then its result."""

    batch: GradientBatch
    network: Network
    params: np.ndarray
    X: np.ndarray
    y: np.ndarray
    with_penalty: bool
    value: tuple[float, np.ndarray] | None = None
    error: BaseException | None = field(default=None, repr=False)

    def result(self) -> tuple[float, np.ndarray]:
        """The loss and gradient, computing every gradient pending (this one with them) if not yet done."""
        if self.value is None and self.error is None:
            self.batch.compute()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


class GradientBatch:
    """The gradients asked for and not yet computed, in one simulation.

    ``stack`` (default: on) computes those of one network and one shape of batch as a stack; off, one at
    a time (the reference the stacked results are checked against).
    """

    def __init__(self, stack: bool = True) -> None:
        self.stack = stack
        self.pending: list[Ticket] = []
        self.stacks = 0  # calls of ``loss_and_grad_stacked``
        self.stacked = 0  # gradients computed in them

    def ask(self, network: Network, params: np.ndarray, X: np.ndarray, y: np.ndarray,
            with_penalty: bool = True) -> Ticket:
        """Ask for ``network.loss_and_grad(params, X, y, with_penalty)``; its ``Ticket`` gives it later."""
        ticket = Ticket(self, network, params, X, y, with_penalty)
        self.pending.append(ticket)
        return ticket

    def compute(self) -> None:
        """Compute every pending gradient: a stack for each group of one network, dtype and batch shape
        (a network that cannot stack, or a group of one, gradient by gradient)."""
        pending, self.pending = self.pending, []
        groups: dict[tuple, list[Ticket]] = {}
        for t in pending:
            key = (id(t.network), t.params.dtype, t.params.shape, t.X.shape, t.y.shape, t.with_penalty)
            groups.setdefault(key, []).append(t)
        for group in groups.values():
            network = group[0].network
            if self.stack and len(group) > 1 and isinstance(network, Network) and network.stackable:
                self._stacked(network, group)
            else:
                for t in group:
                    _one(t)

    def _stacked(self, network: Network, group: list[Ticket]) -> None:
        # one copy each, in C (``np.stack`` would add a Python-level ``expand_dims`` per array)
        params = np.concatenate([t.params for t in group]).reshape(len(group), -1)
        X = np.array([t.X for t in group], dtype=params.dtype)
        y = np.array([t.y for t in group])
        try:
            with np.errstate(all="ignore"):  # as a replica computes: a non-finite gradient is its to judge
                losses, grads = network.loss_and_grad_stacked(params, X, y, group[0].with_penalty)
        except Exception:  # noqa: BLE001 - each gradient alone, so each replica gets its own error
            for t in group:
                _one(t)
            return
        self.stacks += 1
        self.stacked += len(group)
        for t, loss, grad in zip(group, losses, grads):
            t.value = (loss, grad)


def _one(t: Ticket) -> None:
    try:
        with np.errstate(all="ignore"):
            t.value = t.network.loss_and_grad(t.params, t.X, t.y, t.with_penalty)
    except Exception as e:  # noqa: BLE001 - raised in the replica that asked, where it would have been
        t.error = e


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
