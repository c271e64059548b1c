"""Start or connect to a Dask cluster, place actors, and always clean up.

This folder (``dbkit/runtime/dask``) is the only place in dbkit that imports Dask. ``Cluster`` starts
an embedded ``LocalCluster`` (worker processes on 127.0.0.1) by default,
connects to a scheduler address (``tcp://HOST:PORT``: a cluster started with
``dask scheduler`` / ``dask worker``, dask-jobqueue or Kubernetes), or wraps
an existing ``Client``. It closes what it started, exactly once, on
``close()``, at the end of a ``with`` block (errors and KeyboardInterrupt
included) and at interpreter exit.
"""

from __future__ import annotations

import atexit
import logging
import time
import uuid
import weakref
from concurrent.futures import CancelledError

from ..bounded_wait import WorkerLeft, wait_unless_gone
from ..clock import REAL_TIME
from ..real_machines import RealMachines
from ..registry import ActorRegistry
from .scheduler import ClusterError, probe_scheduler
from .task_side import DaskTaskSide
from .worker_processes import WORKER_DASK_CONFIG, WORKER_MALLOC, workers_ignore_group_signals

_OPEN: weakref.WeakSet[Cluster] = weakref.WeakSet()


class Cluster(RealMachines):
    """A Dask client plus the actors dbkit placed on its workers.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler. If neither this nor ``client`` is
        given, a ``LocalCluster`` is started.
    client : distributed.Client, optional
        An existing client to use; it is left open on ``close()``.
    n_workers, threads_per_worker : int
        Size of the embedded LocalCluster.
    timeout : float
        Seconds to wait when connecting to ``scheduler``.
    place_timeout : float
        Seconds to wait for an actor to start on its worker before giving up with a ``ClusterError``.
    """

    def __init__(self, scheduler: str | None = None, client=None, n_workers: int = 2,
                 threads_per_worker: int = 1, timeout: float = 10.0, place_timeout: float = 60.0) -> None:
        import dask
        from distributed import Client, LocalCluster

        if scheduler is not None and client is not None:
            raise ValueError("give either scheduler or client, not both")
        if n_workers < 1 or threads_per_worker < 1:
            raise ValueError(f"n_workers and threads_per_worker must be >= 1, got {n_workers}, {threads_per_worker}")
        if not place_timeout > 0:
            raise ValueError(f"place_timeout must be > 0 seconds, got {place_timeout}")
        self.place_timeout = float(place_timeout)
        self.registry = ActorRegistry()
        self.time = REAL_TIME  # the driver's clock (``dbkit.runtime.clock``)
        self.tag = uuid.uuid4().hex[:10]  # unique task keys, even when an old Cluster's id() is reused
        self.local_cluster = None
        self._owns_client = client is None
        self._closed = False
        self._down_since: float | None = None  # when the client was first seen cut off from its scheduler
        if client is not None:
            self.client = client
        elif scheduler is not None:
            probe_scheduler(scheduler, timeout=min(3.0, timeout))
            try:
                self.client = Client(scheduler, timeout=timeout, direct_to_workers=True)
            except (OSError, TimeoutError) as e:
                raise ClusterError(f"cannot reach the Dask scheduler at {scheduler} within {timeout}s: {e}") from e
        else:
            # Dask's nannies set MALLOC_TRIM_THRESHOLD_=64KiB, which also turns off
            # glibc's adaptive mmap threshold: then every multi-MB array (a gradient,
            # a fetched shard) is a fresh mmap and page-faults on first touch. Measured
            # here: the speech model's loss_and_grad 20 ms -> 9 ms per step with these.
            with dask.config.set({**{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()},
                                  **WORKER_DASK_CONFIG}), workers_ignore_group_signals():
                self.local_cluster = LocalCluster(
                    n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                    host="127.0.0.1", dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR,
                )
            try:
                self.client = Client(self.local_cluster, direct_to_workers=True)
            except BaseException:
                self.local_cluster.close()
                raise
        from .wire import ShardWires

        self.address = self._read_address()  # kept: a closed client no longer knows it
        self.wires = ShardWires(self.client, self.tag)  # sockets beside Dask for fetch and push (issue #12)
        _OPEN.add(self)

    @property
    def kind(self) -> str:
        if self.local_cluster is not None:
            return "local"
        return "scheduler" if self._owns_client else "client"

    @property
    def _connected(self) -> bool:
        """The client's status says it is connected (read only: never a call that could wait)."""
        return str(getattr(self.client, "status", "running")) in ("running", "newly-created")

    @property
    def scheduler_address(self) -> str:
        """The scheduler's address, as read when this object connected (a closed client forgets it)."""
        return self.address

    def _read_address(self) -> str:
        scheduler = getattr(self.client, "scheduler", None)
        if scheduler is not None:
            return str(scheduler.address)
        start = getattr(self.client, "_start_arg", None)  # a closed client: what it was made with
        address = start if isinstance(start, str) else getattr(start, "scheduler_address", None)
        return str(address) if address else "an unknown address"

    def _unreachable(self) -> str:
        """Why no call can reach the scheduler now, and what to do, in one line."""
        if str(getattr(self.client, "status", "")) == "closed":
            whose = "this job's own cluster" if self._owns_client else "the Dask client this job was given"
            return (f"{whose} was closed (scheduler {self.address}; in a notebook, by an earlier "
                    "cluster.close()): make a new one, dbkit.Cluster(), and a new job on it")
        return f"not connected to the Dask scheduler at {self.address}"

    def lost(self, grace: float = 2.0) -> str | None:
        """One line saying the Dask scheduler is lost, or ``None`` while the client is connected.

        Reads the client's status (no call to Dask, so it never waits): a client whose
        connection broke is ``connecting`` while it tries to reconnect, and ``closed``
        when it gives up. The scheduler counts as lost once the client has been cut
        off for ``grace`` seconds (a scheduler that went for good ends the job at once
        when ``grace`` is 0); actors and tasks do not survive a scheduler's loss, so
        a reconnect would not save the run anyway.
        """
        if self._closed:
            return None
        if self._connected:
            self._down_since = None
            return None
        status = str(self.client.status)
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        if status == "connecting" and now - self._down_since < grace:
            return None
        return (f"lost the Dask scheduler at {self.scheduler_address}: its workers' actors and tasks went with "
                "it; start the scheduler again and rerun")

    def workers(self) -> list[str]:
        """Addresses of the current workers, sorted.

        Asks the scheduler each time (``Client.nthreads``): ``scheduler_info()`` can
        return a periodically refreshed copy with no per-worker entries, which once
        made live workers look lost.
        """
        if not self._connected:  # asking would wait out its reconnect
            raise ClusterError(self._unreachable())
        return sorted(self.client.nthreads())

    def drop_worker(self, address: str) -> None:
        """Tell the scheduler ``address`` is gone (a hung machine: it keeps its connection but answers
        nothing) and close this client's connections to it, so that calls waiting on it fail now instead
        of at their timeouts. What it held is then lost, as with a worker that died."""
        async def remove(dask_scheduler, address: str = address) -> None:  # noqa: ANN001 - Dask's scheduler
            await dask_scheduler.remove_worker(address=address, stimulus_id=f"dbkit-hung-{time.time()}",
                                               close=False)

        try:
            self.client.run_on_scheduler(remove)
        except Exception:  # noqa: BLE001 - already gone: the end is the same
            pass
        self.client.loop.add_callback(self.client.rpc.remove, address)

    def dashboard_link(self) -> str | None:
        """The address of the scheduler's dashboard, or ``None`` when it serves none (the scheduler's
        Python lacks ``bokeh>=3.1``). Honours ``distributed.dashboard.link`` (Binder's proxy path)."""
        try:
            if "dashboard" not in self.client.scheduler_info().get("services", {}):
                return None
            return str(self.client.dashboard_link)
        except Exception:  # noqa: BLE001 - a dashboard link is never worth failing a job for
            return None

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> list[str]:
        try:
            self.client.wait_for_workers(n, timeout=timeout)
        except (TimeoutError, OSError) as e:
            raise ClusterError(f"waited {timeout}s for {n} workers, have {len(self.workers())}") from e
        return self.workers()

    def place_actor(self, name: str, cls, *args, worker: str | None = None, **kwargs):
        """Create ``cls(*args, **kwargs)`` as an actor, on ``worker`` if given.

        The actor's Future is kept in the registry under ``name``; the proxy
        is returned.
        """
        if self._closed:
            raise ClusterError("this cluster is closed")
        if not self._connected:
            raise ClusterError(self._unreachable())
        if worker is not None and worker not in (workers := self.workers()):
            # Dask would keep an actor pinned to an unknown worker waiting for it for ever
            raise ClusterError(f"no worker {worker} in the cluster (its workers: {', '.join(workers) or 'none'})")
        if getattr(cls, "takes_side", False):
            kwargs = {**kwargs, "side": DaskTaskSide()}  # finds its worker once there
        future, scattered = self._submit(cls, args, kwargs, worker, key=f"dbkit-{name}-{self.tag}", actor=True)
        try:  # in slices: a pinned actor whose worker dies meanwhile would wait for ever
            proxy = wait_unless_gone(future.result, self.place_timeout,
                                     lambda: worker is not None and worker not in self.workers(), slice_seconds=1.0)
        except (TimeoutError, WorkerLeft) as e:
            future.cancel()
            for a in scattered:
                a.release()
            if isinstance(e, WorkerLeft):
                raise ClusterError(f"worker {worker} left the cluster while actor {name!r} was placed "
                                   "on it") from e
            where = f"on {worker}" if worker else "on any worker"
            raise ClusterError(f"could not place actor {name!r} {where} within {self.place_timeout:g}s "
                               f"(the cluster's workers: {', '.join(self.workers()) or 'none'})") from e
        for a in scattered:
            a.release()
        where = worker or self.client.who_has(future).get(future.key, ["?"])[0]
        self.registry.add(name, future, proxy, where)
        return proxy

    def submit_on(self, worker: str, fn, *args, key: str, **kwargs):
        """Run ``fn(side, *args, **kwargs)`` as a task pinned to ``worker`` (``side``: its Dask side); returns
        its Future.

        A pinned task never moves: if its worker dies, it is lost with it.
        """
        if self._closed:
            raise ClusterError("this cluster is closed")
        future, _ = self._submit(_on_side, (fn, *args), kwargs, worker, key=key)
        return future

    def _submit(self, fn, args, kwargs, worker: str | None, key: str, actor: bool = False):
        opts = {"workers": [worker], "allow_other_workers": False} if worker else {}
        # Large arrays travel as data, not inside the task graph.
        scattered = [self.client.scatter(a, workers=[worker] if worker else None, hash=False)
                     if _is_large_array(a) else a for a in args]
        future = self.client.submit(fn, *scattered, key=key, actor=actor, pure=False, **kwargs, **opts)
        return future, [a for a, b in zip(scattered, args) if a is not b]

    def put(self, value, worker: str):
        """``value`` scattered once to ``worker`` (a Future; a task given it gets the value)."""
        return self.client.scatter(value, workers=[worker], hash=False)

    def wait(self, futures: list, timeout: float, first: bool = False) -> None:
        """``distributed.wait`` that returns at the timeout instead of raising."""
        from distributed import wait

        try:
            wait(futures, timeout=timeout, return_when="FIRST_COMPLETED" if first else "ALL_COMPLETED")
        except (TimeoutError, CancelledError):  # cancelled: its worker died; the caller looks at each status
            pass

    def threads(self) -> dict[str, int]:
        """How many tasks each worker runs at once (its threads)."""
        return dict(self.client.nthreads())

    def run_on_workers(self, fn, *args) -> dict:
        """``fn(*args)`` once on every worker: its value, or the exception it raised, by worker address."""
        return dict(self.client.run(fn, *args, on_error="return"))

    def close(self) -> None:
        """Release every actor, then close what this object started. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        connected = self._connected
        try:
            try:
                self.registry.clear()
            finally:
                self.wires.close(tell_workers=connected)
        finally:
            try:
                if self._owns_client:
                    self._close_client()
            finally:
                if self.local_cluster is not None:
                    self.local_cluster.close()

    def _close_client(self) -> None:
        """Close the client; one cut off from its scheduler is closed at once instead of after its
        reconnect attempts (10 s), and Dask's own lines about the lost connection are not printed."""
        if self._connected or str(self.client.status) == "closed":
            self.client.close()
            return
        quiet = logging.getLogger("distributed.client")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            self.client.close(timeout=2)
        except Exception:  # noqa: BLE001 - closing a client whose scheduler is gone: nothing more to do
            pass
        finally:
            quiet.setLevel(level)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self.workers())} workers"
        return f"<dbkit.Cluster {self.kind}, {state}, {len(self.registry)} actors>"


def _is_large_array(value) -> bool:
    return getattr(value, "nbytes", 0) > 256 * 1024 and hasattr(value, "dtype")


@atexit.register
def _close_all() -> None:
    for cluster in list(_OPEN):
        try:
            cluster.close()
        except Exception:  # noqa: BLE001 - at exit, close what can be closed
            pass


def _on_side(fn, *args, **kwargs):  # noqa: ANN001, ANN202 - runs on the worker
    """A task's body on a Dask worker: ``fn`` given its worker's side."""
    return fn(DaskTaskSide(), *args, **kwargs)
