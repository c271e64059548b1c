"""One partition of one replica's network (DistBelief Sec. 3).

Each partition computes only its own units. Between layers it sends its
partners exactly the boundary activations they need (forward) and the
gradients of the partners' units it used (backward). Its partners are
injected (``connect``): Dask actor proxies on a cluster
(``dbkit.partition.actors``), or other ``PartitionWorker`` objects in
one process. All methods are ``async``: they wait for messages without
holding a thread, so partitions waiting on each other cannot deadlock; the
arithmetic runs on the partition's own thread so the event loop keeps
serving messages meanwhile.

A *wired* partition (``wire_up``, then ``connect_ends``) instead runs each
step whole on a thread, waits on a thread-safe mailbox and sends over its
own wire or in memory (``boundary_link``); the lead partition starts a step
on all with one message each (``dbkit.partition.lead``). The same coroutine
runs either way: on a thread it never suspends (``run_through``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from ..nn import softmax_cross_entropy
from ..ps.records import WireAddress
from ..runtime.run_through import on_event_loop, run_through
from .boundary_link import BoundaryLink, End
from .event_box import EventBox
from .narrow import narrow_layers, own_segments, segment_views
from .ownership import Ownership
from .traffic import inputs_used, needs


class PartitionWorker:
    """Partition ``index`` of ``ownership.k`` of ``ownership.network``; owns ``ownership.param_indices(index)``."""

    def __init__(self, index: int, ownership: Ownership, exchange_timeout: float = 120.0) -> None:
        network = ownership.network
        self.index, self.k, self.network, self.ownership = index, ownership.k, network, ownership
        self.exchange_timeout = float(exchange_timeout)  # a partner silent this long is taken as lost
        self.needs = [needs(ownership, layer) for layer in range(len(network.layers))]
        self.mine = ownership.param_indices(index)
        self.input_cols = inputs_used(network.layers[0], ownership.units(0, index))  # the data it reads
        # narrow arrays: per layer, where each unit sits among my own outputs and among what I read
        self.narrow = narrow_layers(ownership, index)
        self.pos_own = [self._where(nl.own, network.layers[l].out_size) for l, nl in enumerate(self.narrow)]
        self.pos_reads = [self._where(nl.reads, network.layers[l].in_size) for l, nl in enumerate(self.narrow)]
        # where my own units of layer l-1 sit among what layer l reads: a slice when they are one run
        self.own_run = [self._run(nl.own_in_reads) for nl in self.narrow]
        self.receives = [any(m == index for (_, m) in nd) for nd in self.needs]
        self.sends_back = self.receives  # what I received forward, I answer with gradients backward
        # this partition's own parameters only, in ``mine`` order; its layer parts see views of them
        self.segments = own_segments(ownership, index, self.narrow)
        self.weights = [slice(s.start, s.stop) for s in self.segments if s.is_weight]
        self.params = np.zeros(self.mine.size, dtype=np.float32)
        self.views = segment_views(self.params, self.segments, len(network.layers))
        self.partners: list[Any] = []
        self.box = EventBox(index, self.exchange_timeout)  # an actor partition's letters (not wired)
        self.bytes_sent = 0
        self.compute_seconds = 0.0  # wall seconds in this partition's arithmetic (layer parts), cumulative
        self.aborted: str | None = None
        self._outbox: list = []  # this step's messages on their way
        self._pool = None
        self.link: BoundaryLink | None = None  # wired: steps run on a thread (``wire_up``)

    @staticmethod
    def _run(own_in_reads: np.ndarray) -> slice | None:
        """``slice(a, b)`` if every own unit is read and they sit at ``reads[a:b]`` in order, else None."""
        pos = own_in_reads
        if pos.size and (pos >= 0).all() and (np.diff(pos) == 1).all():
            return slice(int(pos[0]), int(pos[-1]) + 1)
        return None

    @staticmethod
    def _where(units: np.ndarray, size: int) -> np.ndarray:
        index = np.full(size, -1, dtype=np.intp)
        index[units] = np.arange(units.size)
        return index

    async def connect(self, partners: list) -> int:
        """Every partition of this replica, in partition order (this one included): objects whose
        ``receive(key, values)`` can be awaited (actor proxies, or ``PartitionWorker`` objects)."""
        if len(partners) != self.k:
            raise ValueError(f"partition {self.index} of {self.k} needs {self.k} partners, got {len(partners)}")
        self.partners = list(partners)
        return len(self.partners)

    def wire_up(self, host: str | None = None) -> WireAddress | None:
        """Make this a wired partition: a mailbox its waiting thread reads and, with ``host``, a listener
        there for partners on other workers; returns where it listens (``None``: partners in this process
        only). Partition 0 leads its replica's steps; every other one follows on a thread of its own."""
        if self.link is None:
            self.link = BoundaryLink(self.index, self.exchange_timeout, host,
                                     on_order=None if self.index == 0 else self._follow)
        return self.link.address

    def connect_ends(self, ends: dict[int, End]) -> int:
        """A wired partition's ends to each partner (``boundary_link``), by partition index."""
        if self.link is None:
            raise RuntimeError(f"partition {self.index} is not wired: call wire_up first")
        if sorted(ends) != [j for j in range(self.k) if j != self.index]:
            raise ValueError(f"partition {self.index} of {self.k} needs an end to each partner, got {sorted(ends)}")
        self.link.connect(ends)
        return len(ends)

    def _follow(self, sender: int, n: int, orders: dict) -> None:
        """A lead's ``go``, run on this partition's serving thread."""
        from .lead import follow

        follow(self, sender, n, orders)

    async def set_params(self, values: np.ndarray) -> int:
        """Load this partition's parameters (``values`` in ``param_indices`` order)."""
        values = np.asarray(values, dtype=np.float32)
        if values.shape != self.mine.shape:
            raise ValueError(f"partition {self.index} owns {self.mine.size} parameters, got {values.shape}")
        self.params[:] = values
        return int(values.size)

    async def _compute(self, fn, *args):
        """Run ``fn(*args)`` on this partition's own arithmetic thread (always the same one, so its
        big temporaries are reused from one memory arena) while the event loop keeps serving messages."""
        self._check_aborted()
        began = time.perf_counter()
        try:
            if self.link is not None:  # a wired step runs on a thread already
                return fn(*args)
            return await asyncio.get_running_loop().run_in_executor(self._thread(), fn, *args)
        finally:
            self.compute_seconds += time.perf_counter() - began

    def _thread(self):
        """This partition's own thread (one, so its big temporaries come from one memory arena)."""
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"dbkit-partition-{self.index}")
        return self._pool

    def shutdown(self) -> None:
        """Let this partition's arithmetic thread end and close its wire (Dask drops an actor by deleting it)."""
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=False)
        link = getattr(self, "link", None)
        if link is not None:
            link.close()

    def __del__(self) -> None:  # Dask dropped the actor: let its arithmetic thread end
        self.shutdown()

    async def receive(self, key: tuple, values: np.ndarray) -> None:
        """A partner's slice, as an actor call (a partition that is not wired)."""
        self.box.put(key, values)

    async def abort(self, reason: str) -> int:
        """Stop waiting for partners (one of them is gone): a wait in progress, and every later
        one, raises at once instead of running out its ``exchange_timeout``, and messages still
        trying to reach a partner are dropped. Returns the waits ended."""
        self.aborted = str(reason)
        ended = 0 if self.link is None else self.link.mailbox.close(self.aborted)
        self._drop_outbox()  # a step blocked on delivering to the dead partner ends too
        ended += self.box.wake_all()
        if self._pool is not None:  # it will not compute again: its thread ends after the current call
            self._pool.shutdown(wait=False)
        return ended

    async def waiting_for(self) -> list[tuple]:
        """The messages this partition is waiting for now, as ``(step, kind, layer, from)`` keys."""
        return ([] if self.link is None else self.link.mailbox.waiting()) + self.box.waiting()

    def _check_aborted(self) -> None:
        if self.aborted is not None:
            raise RuntimeError(f"partition {self.index} was aborted: {self.aborted}")

    async def _take(self, key: tuple) -> np.ndarray:
        self._check_aborted()
        if self.link is not None:  # on this step's thread: wait there
            try:
                values = self.link.mailbox.take(key)[0]
            except RuntimeError:
                self._check_aborted()  # aborted: say so
                raise
            assert values is not None
            return values
        return await self.box.take(key, self._check_aborted)

    def _send_back(self, step: int, l: int, dx: np.ndarray) -> None:
        """Gradients of the partners' units that my part of layer ``l`` read go back to them."""
        for (i, m), u in self.needs[l].items():
            if m == self.index:
                self._send(i, (step, "b", l, self.index), dx[:, self.pos_reads[l][u]])

    def _send(self, to: int, key: tuple, values: np.ndarray) -> None:
        """Send without waiting for the answer (the receiver waits on its mailbox); ``run_step``
        collects the acknowledgements at its end, so one-way latency, not a round trip, is on
        the critical path."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        self.bytes_sent += values.nbytes
        self._post(to, key, values)

    def _post(self, to: int, key: tuple, values: np.ndarray) -> None:
        """Put a message on its way to partner ``to`` (over the wire or in memory when wired; else on this
        event loop; the simulator's partitions deliver at a virtual time instead)."""
        if self.link is not None:
            self.link.post(to, key, values)
            return
        self._outbox.append(asyncio.ensure_future(self._deliver(to, key, values)))

    async def _deliver(self, to: int, key: tuple, values: np.ndarray) -> None:
        await self.partners[to].receive(key, values)

    async def load_batch(self, X: np.ndarray, y: np.ndarray) -> int:
        """Keep a batch here (its columns this partition reads), as a partition holding its data would."""
        X = np.asarray(X, dtype=np.float32)
        self.batch = (X if X.shape[1] == self.narrow[0].reads.size else X[:, self.narrow[0].reads], y)
        return len(y)

    async def run_step(self, step: int, X: np.ndarray | None, y: np.ndarray | None,
                       return_grad: bool = True) -> dict:
        """Forward and backward for one batch on narrow arrays (own and read columns only).

        Returns this partition's gradient (its own entries, ``mine`` order), its
        part ``penalty`` of the L2 term and, on partition 0, the data ``loss``.
        A step that fails (a partner gone, ``abort``) drops its messages still on their way.
        """
        self._check_aborted()
        if self.link is not None and on_event_loop():  # a wired step waits on a thread, never on the loop
            return await asyncio.get_running_loop().run_in_executor(
                self._thread(), run_through, self.run_step(step, X, y, return_grad))
        self._outbox = []
        try:
            return await self._forward_backward(step, X, y, return_grad)
        except BaseException:
            self._drop_outbox()
            raise

    def _drop_outbox(self) -> None:
        """Cancel this step's messages still on their way, and forget them (their tracebacks would
        otherwise hold this partition in a reference cycle until gc)."""
        for sending in self._outbox:
            sending.cancel()
        self._outbox = []

    async def _forward_backward(self, step: int, X: np.ndarray | None, y: np.ndarray | None,
                                return_grad: bool) -> dict:
        net, j, k, lay = self.network, self.index, self.k, self.narrow
        views = self.views
        if X is None:
            X, y = self.batch
        X = np.asarray(X, dtype=np.float32)
        acts = X if X.shape[1] == lay[0].reads.size else X[:, lay[0].reads]  # layer 0 reads the data
        caches = []
        for l, layer in enumerate(net.layers):
            nl = lay[l]
            if l > 0:
                for (i, m), u in self.needs[l].items():  # send what partners read of my units
                    if i == j:
                        self._send(m, (step, "f", l, j), acts[:, self.pos_own[l - 1][u]])
                run = self.own_run[l]
                if run is not None and not self.receives[l] and run.stop - run.start == nl.reads.size:
                    x = acts  # reads exactly my own units: nothing to assemble
                else:
                    x = np.empty((acts.shape[0], nl.reads.size), dtype=np.float32)
                    if run is not None:
                        x[:, run] = acts
                    else:
                        mine = nl.own_in_reads >= 0
                        x[:, nl.own_in_reads[mine]] = acts[:, mine]
                for (i, m), u in self.needs[l].items():
                    if m == j:
                        x[:, self.pos_reads[l][u]] = await self._take((step, "f", l, i))
            else:
                x = acts
            if nl.sub is not None:  # the arithmetic, off the event loop
                acts, cache = await self._compute(nl.sub.forward, views[l], x)
            else:  # elementwise: cheap, not worth a thread hop
                acts, cache = layer.forward({}, x)
            caches.append(cache)
        last = self.ownership.owner[-1]
        loss = None
        if j == 0:
            logits = np.empty((acts.shape[0], last.size), dtype=np.float32)
            logits[:, last == 0] = acts
            for i in range(1, k):
                logits[:, last == i] = await self._take((step, "logits", i))
            assert y is not None
            loss, dlogits = softmax_cross_entropy(logits, y)
            for i in range(1, k):
                self._send(i, (step, "dlogits"), dlogits[:, last == i])
            dout = np.ascontiguousarray(dlogits[:, last == 0])
        else:
            self._send(0, (step, "logits", j), acts)
            dout = await self._take((step, "dlogits"))
        grad = np.empty_like(self.params)  # every entry is written below
        gviews = segment_views(grad, self.segments, len(net.layers))
        for l in range(len(net.layers) - 1, -1, -1):
            layer, nl = net.layers[l], lay[l]
            sent = False
            if nl.sub is not None and l > 0 and self.sends_back[l]:
                # the input gradient first, its boundary off to the partners, then my parameter
                # gradient while those messages travel
                dx = await self._compute(nl.sub.input_grad, views[l], caches[l], dout)
                self._send_back(step, l, dx)
                sent = True
                _, g = await self._compute(nl.sub.backward, views[l], caches[l], dout, False)
            elif nl.sub is not None:
                dx, g = await self._compute(nl.sub.backward, views[l], caches[l], dout, l > 0)
            else:
                dx, g = layer.backward({}, caches[l], dout)
            for key, value in g.items():
                gviews[l][key][...] = value
            if l == 0:
                break
            if not sent:
                self._send_back(step, l, dx)
            run = self.own_run[l]
            if run is not None:  # my own units are one run of what I read (all of it, without partners)
                dout = dx if run.stop - run.start == dx.shape[1] else np.ascontiguousarray(dx[:, run])
            else:
                mine = nl.own_in_reads >= 0
                dout = np.zeros((dx.shape[0], nl.own_in_reads.size), dtype=np.float32)
                dout[:, mine] = dx[:, nl.own_in_reads[mine]]
            for (i, m), u in self.needs[l].items():
                if i == j:
                    dout[:, self.pos_own[l - 1][u]] += await self._take((step, "b", l, m))
        penalty = 0.0
        if net.l2:  # (l2 / 2) ||W||^2 over this partition's weights, and its gradient
            for w in self.weights:
                penalty += 0.5 * net.l2 * float(np.dot(self.params[w], self.params[w]))
                grad[w] += np.float32(net.l2) * self.params[w]
        if self._outbox:  # every message delivered before the step counts as done
            await asyncio.gather(*self._outbox)
        return {"partition": j, "loss": loss, "penalty": penalty,
                "grad": grad if return_grad else None, "bytes_sent": self.bytes_sent,
                "compute_seconds": self.compute_seconds}

