"""Where a Downpour job's parameters live: shards aligned to partitions, each replica's partitions,
and moving both to a new layout while training runs (DistBelief Sec. 3 and 4.1).

With ``partitions = K``, the server keeps the parameters in partition-major
order and every shard holds one partition's parameters
(``dbkit.partition.aligned_layout``), so each partition of a replica fetches
from and pushes to its own shards only. A new layout gathers every shard's
parameters *and* Adagrad accumulators and places new shards in the new order
with that state loaded; the job stops its replicas first and starts them again after.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..config import RunConfig
from ..jobs.heartbeat import Heartbeat, late_by_worker
from ..nn import Network
from ..partition import AlignedLayout, Ownership, aligned_layout, ownership
from ..partition.placement import PartitionPlacement
from ..ps import ParameterShard, ShardedParameters, ShardFigures, ShardState, UpdateRule, make_rule, resolve
from ..ps.client import CALL_TIMEOUT
from ..runtime.protocol import Runtime
from ..runtime.shards import ShardHandles, handles_of, start_shards
from .coordinators import coordinator_class
from .last_read import LastRead


def check_layout(network: Network, config: RunConfig) -> tuple[Ownership, AlignedLayout]:
    """The ownership and shard layout ``config`` asks for; ``ValueError`` if the network or shards cannot
    be split so."""
    own = ownership(network, config.downpour.partitions)
    return own, aligned_layout(own, config.shards)


class Placement:
    """The shards (and, with partitions, each replica's partition actors) of one Downpour job.

    ``_lock`` guards the server and its layout while they are replaced.
    """

    def __init__(self, cluster: Runtime, network: Network, config: RunConfig, shard_workers: list[str],
                 replica_workers: list[str]) -> None:
        self.cluster, self.network = cluster, network
        self.shard_workers, self.replica_workers = shard_workers, replica_workers
        self.ownership, self.alignment = check_layout(network, config)
        self.transport = config.downpour.transport
        self.parts = PartitionPlacement(cluster, network, self.ownership, self.alignment,
                                        lambda: self.replica_workers, self.transport)
        self.server: ShardedParameters | None = None
        # the coordinator of the replicas' loop, if it names one: (key, worker, class), its proxy, how many placed
        self._coordinator: tuple[str, str, type] | None = None
        self._coordinator_proxy: Any = None
        self._coordinators = 0
        self._coordinator_name: str | None = None
        # lock order: after Fleet.launching and Job._sample_lock, before the book's, the registry's and the
        # runtime's (the server and its layout while they are replaced)
        self._lock = threading.RLock()
        self._generation = 0
        self._restores = 0  # shards started again from their checkpoints
        self._shard_names: list[str] = []
        # what the driver last read of each shard: a lost one ends the job cleanly; a shard silent for
        # heartbeat_timeout counts as lost, its worker as hung (issue #21)
        self.last_read = LastRead(config.heartbeat_timeout, gone=self._left)
        # in the runtime's time: virtual seconds on a simulated cluster (this machine's would make its pings, and
        # so its results, depend on how fast the simulation happens to run)
        self.heartbeat = Heartbeat(config.heartbeat_timeout, clock=cluster.time.now)
        self._late: dict[str, tuple[float, tuple[int, ...]]] = {}  # beat() to answered_late(): the beating thread's

    @property
    def partitions(self) -> int:
        return self.alignment.partitions

    def place_shards(self, params: np.ndarray, optimizer: str | UpdateRule, lr: float,
                     opt_state: np.ndarray | None = None,
                     versions: tuple[int, ...] | None = None) -> None:
        """New shards holding ``params`` (network order), with optimizer state and versions if given (a
        checkpoint's); the old shards are released once the new ones hold their state."""
        self._generation += 1
        prefix = f"shard{self._generation}-"
        a = self.alignment
        n = a.layout.n_shards
        names = [f"{prefix}{i}" for i in range(n)]
        values = a.to_server(params)
        rule = make_rule(optimizer, lr)
        try:
            server = start_shards(self.cluster, values, n, optimizer, lr, prefix=prefix, workers=self.shard_workers,
                                  layout=a.layout)
            if opt_state is not None or versions is not None:
                acc = a.to_server(opt_state) if opt_state is not None else None
                loads = [shard.load_state({"start": lo, "stop": hi, "version": versions[i] if versions else 0,
                                           "params": values[lo:hi],
                                           "opt_state": acc[lo:hi] if acc is not None else
                                           rule.new_state(hi - lo),
                                           "optimizer": rule.name, "lr": lr, "rule_settings": rule.settings()})
                         for i, (shard, (lo, hi)) in enumerate(zip(server.shards, a.layout.ranges))]
                for r in loads:
                    resolve(r)
        except BaseException:
            self.cluster.registry.release(*names)
            raise
        with self._lock:
            old, self._shard_names, self.server = self._shard_names, names, server
            self.last_read.reset(values)  # what the new shards start from
        self.cluster.registry.release(*old)

    def handles(self, which: list[int] | None = None, layout=None) -> ShardHandles:
        """Handles of the shards (``which`` of them, with ``layout`` over them) for replicas; with the
        ``socket`` transport they carry each shard's wire (``dbkit.runtime.dask.wire``)."""
        assert self.server is not None
        wires = self.cluster.wires.addresses(self.server.workers) if self.transport == "socket" else None
        return handles_of(self.server, which, layout, wires)

    def parameters(self) -> np.ndarray:
        """The parameters in network order; a lost shard's slice as last read (``last_read.lost`` says which)."""
        with self._lock:
            assert self.server is not None
            return self.alignment.from_server(self.last_read.parameters(self.server))

    def parameter_state(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Parameters and optimizer accumulators (Adagrad), gathered from the shards, in network order."""
        with self._lock:
            assert self.server is not None
            states = self.server.state()
            params = self.alignment.from_server(np.concatenate([s["params"] for s in states]))
            if states[0]["opt_state"] is None:
                return params, None
            return params, self.alignment.from_server(np.concatenate([s["opt_state"] for s in states]))

    def lost_shards(self) -> str | None:
        """Reads every shard once; a line naming those lost (their workers died), or None if none is."""
        with self._lock:
            if self.server is None:
                return None
            self.last_read.parameters(self.server)
            return self.last_read.describe_lost(self.server) if self.last_read.lost else None

    def shard_figures(self) -> list[ShardFigures]:
        with self._lock:
            return self.last_read.shard_figures(self.server) if self.server is not None else []

    def coordinator_for(self, name: str | None) -> tuple[str, str, type] | None:
        """The coordinator a replica loop names (``dbkit.downpour.coordinators``), placed beside shard 0 the first
        time it is asked for, and again if its worker is gone: its ``(key, worker, class)``, for a replica to
        reach it (``None``: the loop names none)."""
        if name is None:
            return None
        cls = coordinator_class(name)
        with self._lock:
            placed = self._coordinator
            if placed is not None and placed[2] is cls and placed[1] in self.cluster.workers():
                return placed
            assert self.server is not None
            worker = self.server.workers[0]
            self._coordinators += 1
            old, self._coordinator_name = self._coordinator_name, f"coordinator{self._coordinators}-{name}"
            proxy = self.cluster.place_actor(self._coordinator_name, cls, worker=worker)
            self._coordinator, self._coordinator_proxy = (str(proxy.key), worker, cls), proxy
        if old is not None:
            self.cluster.registry.release(old)
        return self._coordinator

    def forget_replicas(self, indices: list[int]) -> None:
        """The coordinator forgets these replicas (they ended): nobody waits for them."""
        with self._lock:
            proxy = self._coordinator_proxy
        if proxy is None:
            return
        for i in indices:
            try:
                resolve(proxy.leave(f"replica{i}"), CALL_TIMEOUT)
            except Exception:  # noqa: BLE001 - a lost worker is the recovery's to notice
                return

    def set_lr(self, lr: float) -> None:
        with self._lock:
            if self.server is not None:
                self.server.set_lr(lr)

    def set_optimizer(self, optimizer: str | UpdateRule) -> None:
        with self._lock:
            if self.server is not None:
                self.server.set_optimizer(optimizer)

    def relayout(self, config: RunConfig) -> list[ShardFigures]:
        """Move parameters and optimizer state to shards laid out as ``config`` asks; returns the old
        shards' figures. Nothing is touched if the new layout is refused or cannot be placed."""
        own, alignment = check_layout(self.network, config)
        params, opt_state = self.parameter_state()
        before = self.shard_figures()
        old = (self.ownership, self.alignment)
        with self._lock:
            self.ownership, self.alignment = own, alignment
            try:
                self.place_shards(params, config.rule(), config.shard_lr(), opt_state)
            except BaseException:
                self.ownership, self.alignment = old
                raise
        self.parts.relayout(own, alignment)
        return before

    # ---- checkpoints and lost machines (issue #13) ---------------------------------------------
    def save(self, directory: str, model: str) -> tuple[dict[int, int], dict[int, str]]:
        """Every shard writes its checkpoint into ``directory``, all at once; returns the versions saved
        and, for shards that did not save, why (a lost shard is noticed by ``forget_workers``)."""
        with self._lock:
            assert self.server is not None
            saved, failed, calls = {}, {}, []
            for i, shard in enumerate(self.server.shards):
                try:
                    calls.append((i, shard.save(directory, model)))
                except Exception as e:  # noqa: BLE001 - its worker is gone
                    failed[i] = f"{type(e).__name__}: {e}"
            for i, call in calls:
                try:
                    saved[i] = int(self.last_read.answer(call, self.server.workers[i]))
                except Exception as e:  # noqa: BLE001
                    failed[i] = f"{type(e).__name__}: {e}"
            return saved, failed

    def _left(self, worker: str) -> bool:
        """Whether ``worker`` has left the cluster (False if the scheduler cannot say: the wait goes on)."""
        try:
            return worker not in self.cluster.workers()
        except Exception:  # noqa: BLE001 - the scheduler lost: the job's connection check ends it
            return False

    def replica_worker(self, index: int) -> str:
        """The worker whole replica ``index`` runs on: the replica workers in turn."""
        with self._lock:
            return self.replica_workers[index % len(self.replica_workers)]

    def add_replica_workers(self, workers: list[str]) -> None:
        """More workers for replicas, after those there are (a simulated machine of its own for each new
        replica)."""
        with self._lock:
            self.replica_workers = self.replica_workers + list(workers)

    def forget_workers(self, alive: set[str]) -> list[int]:
        """Place nothing more on workers not in ``alive``; returns the shards that lived on them."""
        with self._lock:
            for attr in ("replica_workers", "shard_workers"):
                keep = [w for w in getattr(self, attr) if w in alive]
                if keep:  # with none left, placing fails with the cluster's own error
                    setattr(self, attr, keep)
            if self.server is None:
                return []
            return [i for i, w in enumerate(self.server.workers) if w not in alive]

    def beat(self, others: dict[str, tuple[Any, str]] | None = None) -> dict[str, tuple[int, ...]]:
        """Ping the shards, the partitions and ``others`` (key -> (actor, its worker): the replicas' control
        actors), never waiting; the workers newly found silent for the heartbeat timeout, each with its
        silent shards (maybe none). Not under this placement's lock: a reader holding it may be waiting on
        the silent machine itself."""
        server = self.server
        if server is None:
            return {}
        where: dict[Hashable, tuple[Any, str]] = {i: (s, w) for i, (s, w) in enumerate(zip(server.shards,
                                                                                          server.workers))}
        registry = self.cluster.registry
        for name in self.parts.names():
            try:
                where[name] = (registry.proxy(name), registry.worker(name))
            except KeyError:  # released meanwhile
                pass
        where.update(others or {})
        hung: dict[str, list[int]] = {}
        for key in self.heartbeat.beat({key: actor for key, (actor, _) in where.items()}):
            shards = hung.setdefault(where[key][1], [])
            if isinstance(key, int):  # a shard: the driver's reads give it up too
                self.last_read.mark_lost(key, f"no answer to a heartbeat for {self.heartbeat.timeout:g}s: its "
                                              "machine is hung")
                shards.append(key)
        self._late.update(late_by_worker(self.heartbeat.answered_late(), {k: w for k, (_, w) in where.items()}))
        return {w: tuple(v) for w, v in hung.items()}

    def answered_late(self) -> dict[str, tuple[float, tuple[int, ...]]]:
        """The workers that answered a heartbeat late since the last call (``beat``): worker -> (its longest
        silence in seconds, its shards among the late). Called by the thread that beats."""
        late, self._late = self._late, {}
        return late

    def forget_gone(self) -> None:
        """``forget_workers`` of every worker the scheduler no longer lists."""
        self.forget_workers(set(self.cluster.workers()))

    def workers_of(self, shards: list[int]) -> list[str]:
        assert self.server is not None
        return [self.server.workers[i] for i in shards]

    def span(self, index: int) -> tuple[int, int]:
        assert self.server is not None
        return self.server.layout.ranges[index]

    def replace_shard(self, index: int, state: ShardState, optimizer: str | UpdateRule, lr: float) -> str:
        """Start shard ``index`` again from ``state`` (its checkpoint), on the live shard worker holding
        fewest shards, with the job's current ``optimizer`` and ``lr``; returns its worker. A worker that
        dies while the shard is placed on it is forgotten and the next is tried (a second machine lost
        during a restore), until no shard worker is left."""
        with self._lock:
            server = self.server
            assert server is not None
            a, b = server.layout.ranges[index]
            while True:
                worker = min(self.shard_workers, key=lambda w: (server.workers.count(w), self.shard_workers.index(w)))
                try:
                    name, proxy = self._start_restored(index, state, optimizer, lr, worker)
                    break
                except Exception:  # noqa: BLE001 - retried only if its worker is gone
                    alive = set(self.cluster.workers())
                    if worker in alive or not [w for w in self.shard_workers if w in alive]:
                        raise
                    self.forget_workers(alive)
            old = self._shard_names[index]
            self._shard_names[index] = name
            server.shards[index], server.workers[index], server.versions[index] = proxy, worker, state.version
            self.last_read.restored(index, (a, b), state.params)
        self.cluster.registry.release(old)
        return worker

    def _start_restored(self, index: int, state: ShardState, optimizer: str | UpdateRule, lr: float, worker: str
                        ) -> tuple[str, object]:
        """Shard ``index`` started from ``state`` on ``worker``: its registry name and proxy."""
        assert self.server is not None
        a, b = self.server.layout.ranges[index]
        self._restores += 1
        name = f"shard{self._generation}-{index}-restore{self._restores}"
        proxy = self.cluster.place_actor(name, ParameterShard, index, a, b, state.params, state.optimizer,
                                         state.lr, worker=worker)
        try:
            resolve(proxy.load_state(state.as_state()), CALL_TIMEOUT)
            # the job's rule now: another name starts fresh state, the same keeps the checkpoint's
            resolve(proxy.set_optimizer(optimizer), CALL_TIMEOUT)
            resolve(proxy.set_lr(lr), CALL_TIMEOUT)
        except BaseException:
            self.cluster.registry.release(name)
            raise
        return name, proxy

    def release(self) -> None:
        """Forget the shards and partitions: actor proxies hold Futures that keep their actors alive."""
        with self._lock:
            self.server = None
            names, self._shard_names = self._shard_names, []
            if self._coordinator_name is not None:
                names.append(self._coordinator_name)
            self._coordinator = self._coordinator_proxy = self._coordinator_name = None
        self.parts.release_all()
        self.cluster.registry.release(*names)
