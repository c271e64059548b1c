"""What a job asks of its runtime's time and places, on real machines (Dask, in process).

A job hosts its own loops (its monitor, its heartbeat, a trainer's steps) on
its runtime: ``every`` is a thread here, a task in virtual time on a simulated
cluster; ``call`` runs its drivers' work at once here, at a simulated instant
there. Real time cannot be held or stopped at an instant, and a job's parts go
to the workers there are: so ``hold``, ``stop_time_at`` and ``rest`` do nothing
and the places are the driver's to choose. ``RealMachines`` is the base of the
Dask runtime's ``Cluster`` and of ``InProcessSession``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .every import every_thread

T = TypeVar("T")


class RealMachines:
    """The time and places of a runtime whose machines are real; see the module docstring."""

    def every(self, owner: Any, body: Callable[[Any], float | None], name: str,
              on_error: Callable[[Any, BaseException], None] | None = None) -> Any:
        """``body(owner)`` again and again, waiting the seconds it returns, until it returns ``None``."""
        return every_thread(owner, body, name, on_error)

    def call(self, fn: Callable[[], T]) -> T:
        """``fn()`` now (on a simulated cluster: at the current simulated instant)."""
        return fn()

    def computing(self, network: Any) -> Any:
        """``network`` as the job's own loops compute with it (a sync SGD step): here, as it is; on a simulated
        cluster each gradient holds a core of the driver's machine for its virtual time."""
        return network

    def read(self, fn: Callable[[], T]) -> T:
        """``fn()``, reading the job's figures or parameters (on a simulated cluster: in no virtual time)."""
        return fn()

    #: whether evaluations mean the model's accuracy (a cost-only simulation runs a stand-in: they do not)
    accuracy_known = True
    bytes_scale = 1.0  # a cost-only simulation's bytes are its stand-in's times this

    #: whether the runtime's time can stand still (virtual time): a paused job is held there, and a ``fit``'s
    #: steps are kept exactly; real time goes on, so the replicas are told to pause
    holds_time = False

    def hold(self, held: bool) -> None:
        """Stop time while a job is paused: real time goes on."""

    def stop_time_at(self, seconds: float | None) -> None:
        """Stop time at ``seconds`` on ``time`` (a ``fit``'s end): real time goes on; the job polls."""

    def rest(self) -> None:
        """The job reached its step target: on a simulated cluster time stands still until it moves again."""

    def resting(self) -> bool:
        """Real time never stands still."""
        return False

    def shard_places(self, shards: int) -> list[str] | None:
        """Where the shards go, if the machines say (``None``: the driver spreads them over the workers)."""
        return None

    def replica_places(self, first: int, end: int, partitions: int) -> list[str] | None:
        """Where replicas ``first .. end - 1`` (each of ``partitions`` parts) go, if the machines say."""
        return None

    def simulation(self) -> Any:
        """A simulated cluster's profile, machines and clocks (``dbkit.jobs.Simulated``); ``None`` here."""
        return None

    def report_fields(self) -> dict[str, Any]:
        """What a report of a job here says beside DESIGN.md's fields (a simulated one: its profile)."""
        return {}
