"""What a driver asks of the machines it runs on: the runtime protocol.

A job's drivers (``Fleet``, ``Placement``, ``Recovery``) place actors (shards,
the replicas' control objects) and long-running tasks (replicas) on workers,
call them, watch which workers are alive, and release what they placed. They
ask for nothing else, so the same drivers run on Dask (``dbkit.Cluster``,
the only code that imports Dask) and in this process
(``dbkit.runtime.inprocess``: deterministic workers for tests and for a
learner without a cluster). A task placed on a worker asks its own side of the
protocol (``TaskSide``) for the actors beside it.

An actor's proxy answers each method call with a future-like object (its
``result(timeout=...)`` gives the value or raises the method's error); a call
to an actor whose worker is gone raises ``RuntimeError`` at once or from
``result``, as a Dask actor's does.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from .clock import Clock

T = TypeVar("T")


class Registry(Protocol):
    """The actors one job placed, by name (``dbkit.runtime.registry.ActorRegistry``)."""

    def proxy(self, name: str) -> Any: ...

    def worker(self, name: str) -> str: ...

    def names(self) -> list[str]: ...

    def release(self, *names: str) -> None: ...


class WireAddresses(Protocol):
    """Where each worker's shard wire listens (``None``: reach its shards through the runtime's calls)."""

    def addresses(self, workers: list[str]) -> dict[str, Any]: ...

    def close(self, tell_workers: bool = True) -> None: ...


class TaskFuture(Protocol):
    """A long-running task's handle (a Dask Future, or an in-process ``Task``)."""

    @property
    def status(self) -> str:
        """pending, finished, error, cancelled or lost."""
        ...

    def result(self, timeout: float | None = None) -> Any: ...

    def exception(self, timeout: float | None = None) -> BaseException | None: ...

    def cancel(self) -> Any: ...

    def add_done_callback(self, fn: Callable[[Any], Any]) -> None:
        """Call ``fn(future)`` once it is no longer pending, on any thread (at once if it is not): a driver
        waiting on many tasks learns which ended without looking at each. A Dask future lost with its
        worker calls nothing: look at ``status`` now and then too."""
        ...


class Runtime(Protocol):
    """One job's session on its machines: what it placed there, and how it asks them."""

    tag: str

    @property
    def registry(self) -> Registry: ...

    @property
    def time(self) -> Clock:
        """The clock the driver polls and bounds its waits by (virtual seconds on a simulated cluster)."""
        ...

    @property
    def wires(self) -> WireAddresses: ...

    @property
    def kind(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    def workers(self) -> list[str]:
        """The live workers' addresses, sorted."""
        ...

    def wait_for_workers(self, n: int, timeout: float = 30.0) -> list[str]: ...

    def place_actor(self, name: str, cls: type, *args: Any, worker: str | None = None, **kwargs: Any) -> Any:
        """``cls(*args, **kwargs)`` on ``worker`` (any if ``None``), registered as ``name``; its proxy. A class
        whose ``takes_side`` is true is built with ``side=`` the ``TaskSide`` of the worker it lives on, as a
        task is given its own (``submit_on``)."""
        ...

    def submit_on(self, worker: str, fn: Callable[..., Any], *args: Any, key: str, **kwargs: Any) -> TaskFuture:
        """Run ``fn(side, *args, **kwargs)`` on ``worker`` as a task that may run for the whole job; ``side`` is
        the ``TaskSide`` of the worker it runs on, given to it rather than looked up."""
        ...

    def put(self, value: Any, worker: str) -> Any:
        """``value`` stored once on ``worker``; what is returned, passed to a task there, arrives as ``value``."""
        ...

    def wait(self, futures: list, timeout: float, first: bool = False) -> None:
        """Return once all of ``futures`` (with ``first``: one of them) are done, or after ``timeout`` seconds."""
        ...

    def threads(self) -> dict[str, int]:
        """How many tasks each worker runs at once."""
        ...

    def run_on_workers(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        """``fn(*args)`` once on every worker: its value, or the exception it raised, by worker."""
        ...

    def lost(self, grace: float = 2.0) -> str | None:
        """One line saying the runtime itself is gone (every worker with it), or ``None``."""
        ...

    def drop_worker(self, address: str) -> None:
        """Count ``address`` as gone (a hung machine): what it held is lost, calls to it fail now."""
        ...

    def dashboard_link(self) -> str | None: ...

    def close(self) -> None:
        """Release every actor this session placed; safe to call twice."""
        ...

    # ---- the job's own loops and time (``dbkit.runtime.real_machines``; in virtual time: ``sim.job_session``)
    def every(self, owner: Any, body: Callable[[Any], float | None], name: str,
              on_error: Callable[[Any, BaseException], None] | None = None) -> Any:
        """``body(owner)`` again and again, waiting the seconds it returns, until ``None`` (a thread on real
        machines, a task in virtual time); ``owner`` is held weakly between two calls. Its ``halt()`` ends it."""
        ...

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()``: the drivers' work (placing, steering, reading the shards) now, or at a simulated instant."""
        ...

    def computing(self, network: Any) -> Any:
        """``network`` as the job's own loops compute with it (on a simulated cluster: each gradient charged
        to the driver's machine)."""
        ...

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()`` reading the job's figures or parameters (on a simulated cluster, as an observer: in no
        virtual time)."""
        ...

    @property
    def holds_time(self) -> bool:
        """Whether ``hold`` stops the runtime's time (virtual time: a paused job is held there, and a ``fit``'s
        steps are kept exactly); on real machines the replicas are told to pause."""
        ...

    def hold(self, held: bool) -> None:
        """Stop the runtime's time while the job is paused, or let it go on (virtual time only)."""
        ...

    def stop_time_at(self, seconds: float | None) -> None:
        """Let the runtime's time go no further than ``seconds`` (a ``fit``'s; virtual time only)."""
        ...

    def rest(self) -> None:
        """The job reached its step target: its time stands still until ``hold(False)`` (virtual time only)."""
        ...

    def resting(self) -> bool:
        """Whether time stands still since ``rest`` or ``hold(True)`` (virtual time only; real time: never). A
        ``fit`` that sees its step target reached waits for the job's own loop to rest there, so that what
        the job does at the target (an evaluation due) is done, at the same instant, however the driver's
        thread and the simulation's happen to interleave."""
        ...

    def shard_places(self, shards: int) -> list[str] | None:
        """The workers the shards go to, where the machines decide (``None``: the driver spreads them)."""
        ...

    def replica_places(self, first: int, end: int, partitions: int) -> list[str] | None:
        """The workers replicas ``first .. end - 1`` go to, where the machines decide (``None``: the driver's)."""
        ...

    def simulation(self) -> Any:
        """A simulated cluster's profile, machines and clocks (``None`` on real machines)."""
        ...

    def report_fields(self) -> dict[str, Any]:
        """What a report says beside DESIGN.md's fields (a simulated run: ``simulated``, its profile)."""
        ...


class TaskSide(Protocol):
    """What a task running on a worker asks of that worker."""

    @property
    def address(self) -> str: ...

    @property
    def time(self) -> Clock:
        """The clock a task sleeps and times its steps by (virtual seconds on a simulated cluster)."""
        ...

    def computing(self, network: Any) -> Any:
        """``network`` as this worker computes with it: itself, or on a simulated machine a network whose
        every gradient also takes that machine's modelled time."""
        ...

    def local(self, key: str) -> Any | None:
        """The actor ``key`` itself when it lives on this worker (called in process), else ``None``."""
        ...

    def remote(self, cls: type, worker: str, key: str) -> Any:
        """A proxy to the actor ``key`` of class ``cls`` on ``worker``."""
        ...

    def same_process(self, worker: str, key: str) -> Any | None:
        """The actor ``key`` on ``worker`` itself when it lives in this process (on Dask: on this worker;
        in process: on any live worker), else ``None``: a partition hands it boundary slices in memory."""
        ...

    def leave_slot(self) -> None:
        """Give up the worker's task slot: this task runs for the whole job (Dask's ``secede``)."""
        ...

    def gather(self, calls: list) -> list:
        """The answers of actor ``calls`` made from this task, in order; the first error as soon as one fails."""
        ...

    def one_blas_thread(self) -> AbstractContextManager[Any]:
        """A context in which this task's numpy uses one BLAS thread, where that is the task's own to set."""
        ...

    def while_alive(self, read: Callable[[], T]) -> Callable[[], T]:
        """``read``, which a long-running task calls at every step, ending the task (``RuntimeError``) once
        its worker is gone; on a runtime whose lost workers take their tasks with them, ``read`` itself."""
        ...


class ClusterFactory(Protocol):
    """What a job may be given as ``cluster=``: machines it opens one session on, and leaves running; the
    job's ``network`` and ``config`` shape a simulated cluster's session (its cost model, its layout)."""

    #: settings a job on these machines takes only before it starts (a simulated cluster lays its shards and
    #: partitions out once): ``set()`` refuses them while it runs, in one line
    fixed_settings: tuple[str, ...]

    def session(self, tag: str = "", **job: Any) -> Runtime: ...

    def admit(self, network: Any, config: Any) -> None:
        """Refuse (``ValueError``), before anything starts, a job these machines cannot run."""
        ...

    def simulation(self) -> Any:
        """Simulated machines' profile and count (``None``: real machines)."""
        ...


def given_cluster(cluster: Any, client: Any, scheduler: str | None, runtime: str = "dask",
                  asked: str | None = None) -> ClusterFactory | None:
    """A job's ``cluster=`` checked: at most one of ``cluster``, ``client``, ``scheduler`` and a ``runtime`` that
    starts its own workers, and machines that open sessions (``session(tag)``); ``None`` when it has none.
    ``asked``: the ``runtime=`` the caller gave, if any (a ``runtime="dask"`` beside ``cluster=`` is refused too:
    the job would run on the machines given, not on Dask)."""
    if runtime != "dask" and (cluster is not None or client is not None):
        raise ValueError(f"runtime={runtime!r} starts workers of its own: give it, or cluster=/client=, not both")
    if asked is not None and cluster is not None:
        raise ValueError(f"runtime={asked!r} and cluster={type(cluster).__name__}(...) both say where the job runs: "
                         "give one (a job given cluster= runs on those machines)")
    if cluster is None:
        return None
    if client is not None or scheduler is not None:
        simulated = callable(getattr(cluster, "simulation", None)) and cluster.simulation() is not None
        if simulated:
            raise ValueError(f"{'scheduler' if scheduler is not None else 'client'} does not apply to a simulated "
                             "cluster (it runs no Dask and has no workers to name)")
        raise ValueError("give one of cluster=, client= and scheduler=, not several")
    if not callable(getattr(cluster, "session", None)) or not callable(getattr(cluster, "admit", None)):
        raise TypeError(f"cluster= takes dbkit's own machines (dbkit.runtime.InProcessCluster), got "
                        f"{type(cluster).__name__}; for a Dask cluster pass client= or scheduler=")
    return cluster
