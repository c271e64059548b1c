"""Where a Downpour job's parameters live: shards aligned to partitions, each replica's
partitions, and laying both out anew while training runs (DistBelief Sec. 3 and 4.1).

With ``partitions = K``, the server keeps the parameters in partition-major
order and every shard holds one partition's parameters
(``dbkit.partition.aligned_layout``), so each partition of a replica fetches
from and pushes to its own shards only. ``set(partitions=K)`` (or ``shards``)
stops the replicas (they push what they accumulated), gathers every shard's
parameters *and* Adagrad accumulators, places new shards in the new order with
that state loaded, and starts the same number of replicas with K partitions.
"""

from __future__ import annotations

import time

import numpy as np

from ..config import RunConfig
from ..partition import AlignedLayout, aligned_layout, boundary_floats, inputs_used
from ..partition import plan as make_plan
from ..ps import ShardedParameters, resolve
from .partition_downpour import DownpourPartition
from .shards import start_shards


class PartitionedLayout:
    """Mixin for ``DownpourSGD``: shard layout, partition placement, re-layout."""

    def _check_layout(self, config: RunConfig) -> AlignedLayout:
        """The layout ``config`` asks for; ``ValueError`` if the network or shards cannot be split so."""
        return aligned_layout(make_plan(self.network, config.partitions), config.shards)

    def _place_shards(self, alignment: AlignedLayout, params: np.ndarray,
                      opt_state: np.ndarray | None = None) -> ShardedParameters:
        """New shards holding ``params`` (network order), with optimizer state if given."""
        c = self.config
        self._generation += 1
        prefix = f"shard{self._generation}-"
        n = alignment.layout.n_shards
        names = [f"{prefix}{i}" for i in range(n)]
        values = alignment.to_server(params)
        try:
            server = start_shards(self.cluster, values, n, c.optimizer, c.lr, prefix=prefix,
                                  workers=self._shard_workers, layout=alignment.layout)
            if opt_state is not None:
                acc = alignment.to_server(opt_state)
                loads = [shard.load_state({"start": a, "stop": b, "version": 0, "params": values[a:b],
                                           "opt_state": acc[a:b], "optimizer": c.optimizer, "lr": c.lr})
                         for shard, (a, b) in zip(server.shards, alignment.layout.ranges)]
                for r in loads:
                    resolve(r)
        except BaseException:
            for name in names:
                self.cluster.registry.release(name)
            raise
        self._shard_names = names
        return server

    def parameter_state(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Parameters and optimizer accumulators (Adagrad), gathered from the shards, in network order."""
        with self._layout_lock:
            states = self.server.state()
            params = self.alignment.from_server(np.concatenate([s["params"] for s in states]))
            if states[0]["opt_state"] is None:
                return params, None
            return params, self.alignment.from_server(np.concatenate([s["opt_state"] for s in states]))

    def _partition_workers(self, index: int) -> list[str]:
        """Where replica ``index``'s partitions run: round-robin over the workers, partition after
        partition. When the partitions divide the workers evenly, each wrap-around shifts by one, or
        every replica's partition 0 (and its task) would land on the same workers."""
        workers, k = self._replica_workers, self.alignment.partitions
        first = index * k
        first += first // len(workers) if len(workers) % k == 0 else 0
        return [workers[(first + j) % len(workers)] for j in range(k)]

    def _place_partitions(self, index: int) -> list[tuple[str, str]]:
        """Start replica ``index``'s partitions, give each its shards and its columns of the
        replica's data; returns their ``(key, worker)`` in partition order."""
        c, a, net = self.config, self.alignment, self.network
        plan = make_plan(net, a.partitions)
        where = self._partition_workers(index)
        names = [f"replica{index}-partition{j}" for j in range(a.partitions)]
        self._partition_names[index] = names
        parts = [self.cluster.place_actor(name, DownpourPartition, j, a.partitions, net, worker=w)
                 for j, (name, w) in enumerate(zip(names, where))]
        handles = [(str(p.key), w) for p, w in zip(parts, where)]
        for r in [p.connect(handles) for p in parts]:
            resolve(r)
        rows = self._parts[index % len(self._parts)]
        X, y = self.data.X_train[rows], self.data.y_train[rows]
        calls = []
        for j, p in enumerate(parts):
            ids = list(a.shards_of[j])
            cols = inputs_used(net.layers[0], plan.units(0, j))
            calls.append(p.attach([str(self.server.shards[s].key) for s in ids], [self.server.workers[s] for s in ids],
                                  a.partition_layout(j), ids, X[:, cols], y, c.batch_size, c.seed + index,
                                  f"replica{index}/partition{j}"))
        for r in calls:
            resolve(r)
        f = boundary_floats(plan)
        self._floats_per_example = f["forward"] + f["backward"]
        return handles

    def _release_partitions(self, indices: list[int], abort: str | None = None) -> None:
        """Drop the partition actors of replicas ``indices``. With ``abort`` (the replica was lost),
        each one is first told to stop waiting for its partners, so its step in progress ends now."""
        for i in indices:
            names = self._partition_names.pop(i, [])
            if abort:
                calls = []
                for name in names:
                    try:
                        calls.append(self.cluster.registry.proxy(name).abort(abort))
                    except Exception:  # noqa: BLE001 - its worker is gone: nothing there to stop
                        pass
                for call in calls:
                    try:
                        call.result(timeout=2)
                    except Exception:  # noqa: BLE001
                        pass
            for name in names:
                self.cluster.registry.release(name)

    def _relayout(self, new: RunConfig) -> None:
        """Re-lay out a running job as ``new`` asks (partitions, shards); parameters and
        optimizer state carry over exactly. The caller holds the change lock."""
        alignment = self._check_layout(new)  # refuses before anything is touched
        live = sorted(self.book.live())
        self._broadcast(live, stop=True)  # each replica pushes what it accumulated, then ends
        self.book.wait(live, timeout=60, state="relaid")
        self._release_partitions(live)
        params, opt_state = self.parameter_state()
        before = self.server.stats()  # the old shards' figures stay in the report after they go
        old, old_names = self.config, self._shard_names
        with self._layout_lock:
            self.config = new
            try:
                server = self._place_shards(alignment, params, opt_state)
            except BaseException:
                self.config = old
                self._relaunch(len(live))
                raise
            self.server, self.alignment = server, alignment
            for name in old_names:
                self.cluster.registry.release(name)
        self.layouts.append({"t": round(time.perf_counter() - self._t0, 4), "step": self.total_steps(),
                             "partitions": new.partitions, "shards": new.shards, "shards_before": before})
        self._relaunch(len(live))

    def _relaunch(self, n: int) -> None:
        with self._launching:
            for _ in range(n):
                self._launch(self.book.next_index())
