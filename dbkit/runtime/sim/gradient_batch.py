"""Gradients due in the same stretch of virtual time, computed as one stack.

A simulated replica's gradient holds a core of its machine for the modelled
seconds (``TimedNetwork.hold``); its result is needed only when the hold ends.
So its arithmetic can wait until then, and every gradient asked for in the
meantime (other replicas', holding their own machines) be computed with it in
one call of ``Network.loss_and_grad_stacked``: the same numbers, bit for bit,
with numpy's per-call cost paid once per stack instead of once per gradient.
Nothing else changes: the inputs are the replica's own arrays, which nobody
writes while it waits, and each result is handed back to the replica that
asked for it, in virtual time as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...nn import Network


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

