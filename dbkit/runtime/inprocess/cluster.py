"""A cluster of workers in this process, and one job's session on it (``dbkit.runtime.Runtime``).

``InProcessCluster(workers=2)`` can be passed as ``cluster=`` to a job: its
shards, control objects and replicas are placed on in-process workers exactly
as on Dask workers (actors called on the worker's one actor thread, replicas
on threads of their own, shards beside a replica called in process), without
any other process or socket. Arguments cross to a worker as copies, as they
would when Dask pickles them, so no driver array is shared with an actor.
"""

from __future__ import annotations

import concurrent.futures
import copy
import threading
import uuid
import weakref
from collections.abc import Callable
from typing import Any

from ..clock import REAL_TIME
from ..real_machines import RealMachines
from ..registry import ActorRegistry
from ..run_here import run_here
from .task_side import InProcessTaskSide
from .workers import ActorProxy, Placed, Task, Worker


def admit_transport(config: Any) -> None:
    """``ValueError`` for ``transport="actor"`` (#48: it was ignored): in-process replicas call their shards
    directly, with neither Dask's actors nor its sockets to choose between."""
    section = getattr(config, "downpour", None)
    if getattr(section, "transport", "socket") == "actor":
        raise ValueError("transport='actor' chooses how replicas reach shards on Dask workers; in-process workers' "
                         "replicas call their shards directly: leave --transport out (or use --runtime dask)")


class InProcessCluster:
    """``workers`` in-process workers, named ``inprocess://worker-K``; close it (or use ``with``) when done.

    ``_lock`` guards the workers and whether the cluster is closed.
    """

    def __init__(self, workers: int = 2) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a whole number >= 1, got {workers!r}")
        addresses = [f"inprocess://worker-{k}" for k in range(workers)]
        self._workers = {a: Worker(a) for a in addresses}
        self._closed = False
        # lock order: leaf (the worker table and the closed flag)
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _close_workers, list(self._workers.values()))

    def session(self, tag: str = "", closes_cluster: bool = False, **job: Any) -> InProcessSession:
        """One job's session: what it places here, released by its ``close()``; the cluster stays unless
        ``closes_cluster`` (a job's own workers). ``job`` (its ``network`` and ``config``) shapes nothing here."""
        if self._closed:
            raise RuntimeError("this InProcessCluster is closed")
        return InProcessSession(self, tag, closes_cluster)

    fixed_settings: tuple[str, ...] = ()  # every setting a Dask cluster's job steers, these workers' do too

    def admit(self, network: Any, config: Any) -> None:
        """Every job a Dask cluster runs, these workers run too; only the choice of Dask's transport is refused
        (``admit_transport``)."""
        admit_transport(config)

    def simulation(self) -> None:
        """Real machines: no simulation."""
        return None

    @property
    def closed(self) -> bool:
        return self._closed

    def workers(self) -> list[str]:
        """The live workers' addresses, sorted."""
        with self._lock:
            return sorted(a for a, w in self._workers.items() if w.alive)

    def worker(self, address: str, alive: bool = True) -> Worker:
        """The worker at ``address``; with ``alive``, only a live one (else ``RuntimeError``)."""
        with self._lock:
            if not alive and address in self._workers:
                return self._workers[address]
            if address not in self._workers or not self._workers[address].alive:
                live = sorted(a for a, w in self._workers.items() if w.alive)
                raise RuntimeError(f"no live in-process worker {address} (live: {', '.join(live) or 'none'})")
            return self._workers[address]

    def placed(self) -> dict[str, list[str]]:
        """The keys of the actors on each live worker (what jobs placed and have not released)."""
        with self._lock:
            live = [w for w in self._workers.values() if w.alive]
        return {w.address: w.keys() for w in live}

    def task_side(self, worker: Worker) -> InProcessTaskSide:
        return InProcessTaskSide(worker, dict(self._workers))

    def lose_worker(self, address: str) -> None:
        """Let worker ``address`` die, as a machine would: its actors are gone, its tasks lost."""
        self.worker(address).lose()

    def close(self) -> None:
        """Stop every worker's actor thread. Safe to call twice."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> InProcessCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.workers())} workers"
        return f"<dbkit.runtime.InProcessCluster {state}>"


def _close_workers(workers: list[Worker]) -> None:
    for w in workers:
        w.close()


NO_LIMIT = 2**31 - 1  # tasks an in-process worker runs at once: each has a thread of its own


class Stored:
    """A value put on a worker once (``put``): tasks there get it as it is, not a copy per task."""

    def __init__(self, value: Any, worker: str) -> None:
        self.value, self.worker = value, worker


def _arrive(value: Any) -> Any:
    """What a task's argument is on its worker: a stored value itself, anything else a copy (as unpickled)."""
    return value.value if isinstance(value, Stored) else copy.deepcopy(value)


class NoWires:
    """In process, shards are reached by calls: no worker has a wire."""

    def addresses(self, workers: list[str]) -> dict[str, Any]:
        return {w: None for w in workers}

    def close(self, tell_workers: bool = True) -> None:
        pass


class InProcessSession(RealMachines):
    """One job's actors and tasks on an ``InProcessCluster`` (a ``Runtime``). ``_lock`` guards its tasks and
    ``_closed``."""

    registry: ActorRegistry
    wires: NoWires

    def __init__(self, cluster: InProcessCluster, tag: str, closes_cluster: bool = False) -> None:
        self.cluster, self.tag = cluster, tag or uuid.uuid4().hex[:10]
        self._closes_cluster = closes_cluster
        self.registry = ActorRegistry()
        self.wires = NoWires()
        self.time = REAL_TIME  # the driver's clock (``dbkit.runtime.clock``)
        self._tasks: list[Task] = []
        self._closed = False
        # lock order: leaf (the session's tasks and closed flag)
        self._lock = threading.Lock()

    @property
    def kind(self) -> str:
        return "in-process"

    @property
    def closed(self) -> bool:
        return self._closed

    def workers(self) -> list[str]:
        return self.cluster.workers()

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> list[str]:
        workers = self.workers()
        if len(workers) < n:
            raise RuntimeError(f"the in-process cluster has {len(workers)} live workers, fewer than {n}")
        return workers

    def place_actor(self, name: str, cls: type, *args: Any, worker: str | None = None, **kwargs: Any) -> Any:
        if self._closed or self.cluster.closed:
            raise RuntimeError("this session is closed")
        address = worker if worker is not None else self._least_loaded()
        w = self.cluster.worker(address)
        key = f"dbkit-{name}-{self.tag}"
        side = {"side": self.cluster.task_side(w)} if getattr(cls, "takes_side", False) else {}
        w.add(key, cls(*copy.deepcopy(args), **copy.deepcopy(kwargs), **side))
        proxy = ActorProxy(w, key)
        self.registry.add(name, Placed(w, key), proxy, address)
        return proxy

    def _least_loaded(self) -> str:
        workers = self.workers()
        if not workers:
            raise RuntimeError("the in-process cluster has no live worker")
        counts = {w: 0 for w in workers}
        for name in self.registry.names():
            where = self.registry.worker(name)
            if where in counts:
                counts[where] += 1
        return min(workers, key=lambda w: counts[w])

    def submit_on(self, worker: str, fn: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> Task:
        if self._closed:
            raise RuntimeError("this session is closed")
        w = self.cluster.worker(worker, alive=False)  # a task sent to a dead worker is lost, as on Dask
        side = self.cluster.task_side(w)
        task = Task(w, key, fn, (side, *(_arrive(a) for a in args)), {k: _arrive(v) for k, v in kwargs.items()})
        with self._lock:
            self._tasks.append(task)
        return task

    def put(self, value: Any, worker: str) -> Stored:
        return Stored(copy.deepcopy(value), worker)

    def wait(self, futures: list, timeout: float, first: bool = False) -> None:
        concurrent.futures.wait(futures, timeout, concurrent.futures.FIRST_COMPLETED if first else
                                concurrent.futures.ALL_COMPLETED)

    def threads(self) -> dict[str, int]:
        return {w: NO_LIMIT for w in self.workers()}

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        return run_here(self.workers(), fn, *args)

    def lost(self, grace: float = 2.0) -> str | None:
        if self.cluster.closed and not self._closed:
            return "the in-process cluster was closed: its workers' actors and tasks went with it"
        return None

    def drop_worker(self, address: str) -> None:
        try:
            self.cluster.lose_worker(address)
        except RuntimeError:  # already gone
            pass

    def dashboard_link(self) -> str | None:
        return None

    def close(self, join: float = 30.0) -> None:
        """Release every actor, then wait (at most ``join`` seconds in all) for this session's task threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tasks, self._tasks = self._tasks, []
        self.registry.clear()
        for t in tasks:
            t.join(join)
        if self._closes_cluster:
            self.cluster.close()

    def __repr__(self) -> str:
        return f"<in-process session {self.tag}: {len(self.registry)} actors>"
