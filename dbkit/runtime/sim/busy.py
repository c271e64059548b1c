"""How busy each kind of resource of a simulated run was, and which one saturated.

Many replicas saturate few parameter shards (paper Sec. 4.1): a shard's cores
serving requests, or its link carrying them, is busy all the time, and adding
replicas no longer adds examples per second. Each fraction here is 0 to 1 of
the resource's capacity over the run's virtual seconds: a shard's CPU is the
seconds of service its requests took over its cores' seconds; a link is the
busier direction of a NIC (a message holds the sender's and the receiver's for
its bytes over the bandwidth). Of each kind, the busiest machine counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from .machines import Machine
from .shard_service import ShardService

SATURATED = 0.9
"""A resource busy at least this fraction of the time is named saturated."""

#: how each kind is said in a summary
NAMES = {"shard_cpu": "shard CPU", "shard_link": "shard link", "replica_link": "replica link",
         "coordinator": "coordinator CPU"}


@dataclass(frozen=True)
class Busy:
    """The busiest shard CPU, shard link, replica link and coordinator of a run, each 0 to 1."""

    shard_cpu: float = 0.0
    shard_link: float = 0.0
    replica_link: float = 0.0
    coordinator: float = 0.0

    @classmethod
    def of(cls, machines: Iterable[Machine], queues: Iterable[ShardService], seconds: float) -> Busy:
        """Read off a run's ``machines`` and its shards' ``queues`` after ``seconds`` of virtual time."""
        if seconds <= 0:
            return cls()
        machines = list(machines)

        def busiest(values: Iterable[float]) -> float:
            return round(min(1.0, max(values, default=0.0)), 4)

        def having(role: str) -> list[Machine]:
            return [m for m in machines if any(r.startswith(role) for r in m.roles)]

        return cls(shard_cpu=busiest(q.figures.busy / (seconds * q.servers) for q in queues),
                   shard_link=busiest(m.link_busy(seconds) for m in having("shard")),
                   replica_link=busiest(m.link_busy(seconds) for m in having("replica")),
                   coordinator=busiest(m.utilisation(seconds) for m in having("coordinator")))

    def saturated(self) -> str | None:
        """The busiest kind if it is busy at least :data:`SATURATED` of the time, else ``None``."""
        kind, value = max(asdict(self).items(), key=lambda kv: kv[1])
        return kind if value >= SATURATED else None

    def to_dict(self) -> dict[str, float | str | None]:
        return {**asdict(self), "saturated": self.saturated()}

    def describe(self) -> str:
        """One line: each kind's busy fraction, the saturated one named first."""
        fractions = sorted(asdict(self).items(), key=lambda kv: -kv[1])
        said = ", ".join(f"{NAMES[k]} {v:.2f}" for k, v in fractions)
        first = self.saturated()
        return (f"saturated: {NAMES[first]} (busy {getattr(self, first):.2f}); " if first else "no resource "
                f"saturated (busy >= {SATURATED:g}); ") + "busiest " + said
