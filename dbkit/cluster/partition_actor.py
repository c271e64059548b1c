"""A partition of one replica's network as a Dask actor (DistBelief Sec. 3).

Each partition computes only its own units. Between layers it sends its
partners exactly the boundary activations they need (forward) and the
gradients of the partners' units it used (backward), actor to actor. All
methods are ``async``: they run on the worker's event loop and wait for
messages without holding a thread, so partitions on one worker, or partitions
waiting on each other, cannot deadlock; the arithmetic runs in a thread
(``asyncio.to_thread``) so the loop keeps serving messages meanwhile.
"""

from __future__ import annotations

import asyncio

import numpy as np

from ..nn import Dense, LocallyConnected, Network, softmax_cross_entropy
from ..partition import plan as make_plan
from ..partition.execute import _sub_layer, add_sub_grad
from ..partition.traffic import inputs_used, needs


class PartitionWorker:
    """Partition ``index`` of ``k`` of ``network``; owns ``plan.param_indices(index)``."""

    def __init__(self, index: int, k: int, network: Network) -> None:
        self.index, self.k, self.network = index, k, network
        self.plan = make_plan(network, k)
        self.needs = [needs(self.plan, layer) for layer in range(len(network.layers))]
        self.mine = self.plan.param_indices(index)
        self.input_cols = inputs_used(network.layers[0], self.plan.units(0, index))  # the data it reads
        self.params = np.zeros(network.size, dtype=np.float32)  # only this partition's entries are used
        self.partners: list = []
        self.mailbox: dict = {}
        self.events: dict = {}
        self.bytes_sent = 0

    async def connect(self, partners: list[tuple[str, str]]) -> int:
        """Proxies to every partition, given as ``(key, worker address)`` in partition order."""
        from distributed.actor import Actor

        self.partners = [Actor(PartitionWorker, w, k) for k, w in partners]
        return len(self.partners)

    async def set_params(self, values: np.ndarray) -> int:
        """Load this partition's parameters (``values`` in ``param_indices`` order)."""
        values = np.asarray(values, dtype=np.float32)
        if values.shape != self.mine.shape:
            raise ValueError(f"partition {self.index} owns {self.mine.size} parameters, got {values.shape}")
        self.params[self.mine] = values
        return int(values.size)

    async def receive(self, key: tuple, values: np.ndarray) -> None:
        self.mailbox[key] = values
        self.events.setdefault(key, asyncio.Event()).set()

    async def _take(self, key: tuple) -> np.ndarray:
        await self.events.setdefault(key, asyncio.Event()).wait()
        del self.events[key]
        return self.mailbox.pop(key)

    def _send(self, to: int, key: tuple, values: np.ndarray) -> None:
        """Send without waiting for the answer (the receiver waits on its mailbox); ``run_step``
        collects the acknowledgements at its end, so one-way latency, not a round trip, is on
        the critical path."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        self.bytes_sent += values.nbytes
        self._outbox.append(asyncio.ensure_future(self._deliver(to, key, values)))

    async def _deliver(self, to: int, key: tuple, values: np.ndarray) -> None:
        await self.partners[to].receive(key, values)

    async def run_step(self, step: int, X: np.ndarray, y: np.ndarray, return_grad: bool = True) -> dict:
        """Forward and backward for one batch; returns this partition's gradient (own entries), loss on partition 0."""
        net, plan, j, k = self.network, self.plan, self.index, self.k
        self._outbox = []
        views = net.views(self.params)
        X = np.asarray(X, dtype=np.float32)
        if X.shape[1] == self.input_cols.size and self.input_cols.size != net.in_size:
            acts = np.zeros((X.shape[0], net.in_size), dtype=np.float32)  # only its columns were sent
            acts[:, self.input_cols] = X
        else:
            acts = X
        caches = []
        for l, layer in enumerate(net.layers):
            if l > 0:
                for (i, m), u in self.needs[l].items():
                    if i == j:
                        self._send(m, (step, "f", l, j), acts[:, u])
                acts = acts.copy()
                for (i, m), u in self.needs[l].items():
                    if m == j:
                        acts[:, u] = await self._take((step, "f", l, i))
            units = plan.units(l, j)
            if isinstance(layer, (Dense, LocallyConnected)):  # the arithmetic, off the event loop
                acts, cache = await asyncio.to_thread(self._forward, l, layer, units, views, acts)
            else:  # elementwise: cheap, not worth a thread hop
                acts, cache = self._forward(l, layer, units, views, acts)
            caches.append(cache)
        last = plan.owner[-1]
        loss = None
        if j == 0:
            logits = acts
            for i in range(1, k):
                logits[:, last == i] = await self._take((step, "logits", i))
            loss, dlogits = softmax_cross_entropy(logits, y)
            loss += net.penalty(self.params) if k == 1 else 0.0
            for i in range(1, k):
                self._send(i, (step, "dlogits"), dlogits[:, last == i])
            dout = np.zeros_like(dlogits)
            dout[:, last == 0] = dlogits[:, last == 0]
        else:
            self._send(0, (step, "logits", j), acts[:, last == j])
            dout = np.zeros((acts.shape[0], last.size), dtype=np.float32)
            dout[:, last == j] = await self._take((step, "dlogits"))
        grad = np.zeros_like(self.params)
        for l in range(len(net.layers) - 1, -1, -1):
            layer, units = net.layers[l], plan.units(l, j)
            if isinstance(layer, (Dense, LocallyConnected)):
                dx = await asyncio.to_thread(self._backward, l, layer, units, views, caches[l], dout, grad)
            else:
                dx = self._backward(l, layer, units, views, caches[l], dout, grad)
            if l == 0:
                break
            for (i, m), u in self.needs[l].items():
                if m == j:
                    self._send(i, (step, "b", l, j), dx[:, u])
            own = plan.owner[l - 1] == j
            dout = np.zeros_like(dx)
            dout[:, own] = dx[:, own]
            for (i, m), u in self.needs[l].items():
                if i == j:
                    dout[:, u] += await self._take((step, "b", l, m))
        if net.l2:
            grad += net.penalty_grad(self.params)
        penalty = net.penalty(self._own_weights()) if k > 1 else 0.0
        await asyncio.gather(*self._outbox)  # every message delivered before the step counts as done
        self.last_grad = grad[self.mine]
        return {"partition": j, "loss": loss, "penalty": penalty,
                "grad": self.last_grad if return_grad else None, "bytes_sent": self.bytes_sent}

    def _own_weights(self) -> np.ndarray:
        only = np.zeros_like(self.params)
        only[self.mine] = self.params[self.mine]
        return only

    def _forward(self, l, layer, units, views, x):
        full = np.zeros((x.shape[0], layer.out_size), dtype=np.float32)
        if isinstance(layer, (Dense, LocallyConnected)):
            sub, slicer = _sub_layer(layer, units)
            out, cache = sub.forward(slicer(views[l]), x)
            full[:, units] = out
            return full, (sub, slicer, cache)
        out, cache = layer.forward({}, x[:, units])
        full[:, units] = out
        return full, (None, None, cache)

    def _backward(self, l, layer, units, views, cache, dout, grad):
        sub, slicer, c = cache
        if sub is None:
            dx_own, _ = layer.backward({}, c, dout[:, units])
            dx = np.zeros((dout.shape[0], layer.in_size), dtype=np.float32)
            dx[:, units] = dx_own
            return dx
        dx, g = sub.backward(slicer(views[l]), c, dout[:, units], need_dx=l > 0)
        add_sub_grad(self.network.views(grad)[l], layer, units, g)
        return dx
