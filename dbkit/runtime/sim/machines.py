"""Simulated machines: cores that computations hold, and a NIC that messages hold.

A computation holds a core of its machine for the time the cost model gives;
a message holds the sender's and the receiver's NIC at once for its bytes at
the slower of their bandwidths, then travels the network's latency. Both are
first come, first served (a network may instead let messages share NICs:
``shared_links``). Every reservation is made at the current virtual
time, in the order events happen, so it can be worked out at once (the
earliest free core, the later of two NICs' free times) instead of with an
event per queue.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .shared_links import SharedLinks

if TYPE_CHECKING:
    from .engine import Simulation


class Cores:
    """``n`` identical cores, first come first served."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"a machine needs at least one core, got {n}")
        self.n = n
        self._free = [0.0] * n  # a heap of the times each core becomes free
        self.busy_seconds = 0.0

    def reserve(self, now: float, seconds: float, threads: int = 1) -> float:
        """Hold the earliest free core (or ``threads`` of them, for work split evenly across them) from
        when it is free; returns when the work ends."""
        if threads != 1:  # (one thread, by far the most common, needs no clamping)
            threads = max(1, min(int(threads), self.n))
        if threads == 1:
            start = max(now, self._free[0])
            end = start + seconds
            heapq.heapreplace(self._free, end)
            self.busy_seconds += seconds
            return end
        if threads == self.n:  # every core: from when the last is free (a list of equal times is a heap)
            start = max(now, max(self._free))
            end = start + seconds / threads
            self._free = [end] * threads
            self.busy_seconds += seconds
            return end
        taken = [heapq.heappop(self._free) for _ in range(threads)]
        start = max(now, taken[-1])
        end = start + seconds / threads
        for _ in range(threads):
            heapq.heappush(self._free, end)
        self.busy_seconds += seconds
        return end

    def free_at(self, threads: int = 1) -> float:
        """When ``threads`` of the cores are next free at once."""
        if threads == 1:  # (by far the most asked: every message's arrival)
            return self._free[0]
        threads = max(1, min(int(threads), self.n))
        if threads == 1:
            return self._free[0]
        return max(self._free) if threads == self.n else sorted(self._free)[threads - 1]


@dataclass
class Machine:
    """One simulated machine: ``cores`` and a NIC of ``bandwidth`` bytes per second each way."""

    name: str
    cores: Cores
    bandwidth: float
    tx_free: float = 0.0
    rx_free: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    tx_busy: float = 0.0  # seconds its NIC has spent sending, and receiving (a message holds both ends)
    rx_busy: float = 0.0
    roles: list[str] = field(default_factory=list)
    cpu_factor: float = 1.0
    replicas: int = 0  # replicas (or replica partitions) placed here
    host: Cores | None = None  # the cores of the host this machine shares with others (worker processes)
    host_slowdown: float = 1.0  # what other processes on the host take of its cores: their time is stretched
    release_seconds: float = 0.0  # a computation lets short work in this soon (0: short work waits for it)
    handoff_seconds: float = 0.0  # what each such hand-off of the interpreter lock costs the computation
    computing_until: float = 0.0  # when the computations reserved so far end
    side_free: float = 0.0  # when the short work let in during computations is done
    debt: float = 0.0  # seconds of short work let in (before this machine's factors), the next computation's

    def reserve(self, now: float, seconds: float, threads: int = 1) -> float:
        """Hold a core (or ``threads``) for ``seconds`` of work at this machine's speed; returns when it ends.
        On a shared host the work also holds one of the host's cores, from when both are free."""
        if seconds <= 0:
            return now
        seconds *= self.cpu_factor
        if self.host is None:
            return self.cores.reserve(now, seconds, threads)
        seconds *= self.host_slowdown
        start = max(now, self.cores.free_at(threads), self.host.free_at(threads))
        self.host.reserve(start, seconds, threads)
        return self.cores.reserve(start, seconds, threads)

    def compute(self, now: float, seconds: float, threads: int = 1) -> float:
        """``reserve`` for a computation (a gradient, a layer): it also pays for the short work let in
        during the computations before it (``interleave``)."""
        seconds, self.debt = seconds + self.debt, 0.0
        end = self.reserve(now, seconds, threads)
        self.computing_until = max(self.computing_until, end)
        return end

    def interleave(self, now: float, seconds: float) -> float:
        """``reserve`` for short work of another thread (a shard's service, a message's CPU): while a
        computation holds the core and ``release_seconds`` is set, it runs at the computation's next
        release of the interpreter lock, one such piece at a time, and the next computation pays for it;
        else it waits for a core as any work does."""
        if self.release_seconds <= 0 or now >= self.computing_until or seconds <= 0:
            return self.reserve(now, seconds)
        start = max(now + self.release_seconds, self.side_free)
        self.side_free = end = start + seconds * self.cpu_factor * self.host_slowdown
        self.debt += seconds + self.handoff_seconds
        return end

    def utilisation(self, seconds: float) -> float:
        """Mean busy cores over ``seconds`` of virtual time, as a fraction of all cores."""
        return self.cores.busy_seconds / (seconds * self.cores.n) if seconds > 0 else 0.0

    def link_busy(self, seconds: float) -> float:
        """The busier direction of its NIC over ``seconds`` of virtual time: the fraction of them it spent
        sending (or receiving), 0 to 1."""
        return min(1.0, max(self.tx_busy, self.rx_busy) / seconds) if seconds > 0 else 0.0


@dataclass
class Network:
    """What connects the machines: one ``latency`` for every message between two machines; a message
    within a machine costs ``local_latency`` and no NIC. ``shared``: messages crossing a NIC at once share it
    (``shared_links``, as TCP flows do) instead of holding it in turn, first come, first served."""

    latency: float
    local_latency: float = 0.0
    shared: bool = False
    _links: SharedLinks | None = field(default=None, repr=False, compare=False)

    def send(self, sim: Simulation, start: float, src: Machine, dst: Machine, nbytes: int,
             then: Callable[[], None], extra: float = 0.0) -> None:
        """Send ``nbytes`` from ``src`` to ``dst`` from ``start`` (now or later, on machines of their own);
        ``then()`` runs when the last byte has arrived, and ``extra`` seconds more."""
        if self.shared and src is not dst:
            if self._links is None or self._links.sim is not sim:
                self._links = SharedLinks(sim)
            self._links.send(start, src, dst, nbytes, self.latency + extra, then)
            return
        arrival, now = self.transfer(start, src, dst, nbytes) + extra, sim.now
        if arrival <= now:
            then()
        else:
            sim.at(arrival - now, then)

    def transfer(self, now: float, src: Machine, dst: Machine, nbytes: int) -> float:
        """Send ``nbytes`` from ``src`` to ``dst`` starting no earlier than ``now``, first come, first
        served; returns when the last byte has arrived."""
        if src is dst:
            return now + self.local_latency
        seconds = nbytes / min(src.bandwidth, dst.bandwidth)
        start = max(now, src.tx_free, dst.rx_free)
        src.tx_free = dst.rx_free = start + seconds
        src.tx_busy += seconds
        dst.rx_busy += seconds
        src.bytes_sent += nbytes
        dst.bytes_received += nbytes
        src.messages_sent += 1
        return start + seconds + self.latency


# When a thread woken by a message gets to run on a host whose cores are all computing.
#
# A simulated machine of the ``here`` profile is a worker process on a host of two cores: one Python thread
# of it runs at a time. A request or a reply that reaches it while every core of the host is computing (each
# worker's replica stepping) waits until a computation pauses -- a replica waiting for its previous push or a
# fetch -- or until Python's switch interval (``switch_seconds``, ``sys.getswitchinterval()``: 5 ms) makes a
# computing thread let go. Replicas computing step after step thus delay the shards beside them by up to the
# switch interval: in real LocalCluster runs this is why staleness grows at large n_push (answers come back
# later than 16 short steps) and why replicas sharing a worker stall on their previous push. A host with an
# idle core (one replica on two workers) takes a message at once; machines with ``switch_seconds = 0`` (the
# paper's) take such work first come, first served.

def when_free(sim: Simulation, machine: Machine, switch_seconds: float, then: Callable[[], None]) -> None:
    """Call ``then()`` when a thread newly woken on ``machine`` would run: now if a core is idle (of its host,
    when it shares one), else when a computation holding one pauses or ``switch_seconds`` have passed,
    whichever comes first."""
    cores = machine.host if machine.host is not None else machine.cores
    if switch_seconds <= 0 or cores.free_at() <= sim.now:
        then()
        return
    deadline = sim.now + switch_seconds

    def check() -> None:  # runs after the holder's own wake-up at the same instant: it re-reserves first
        now, free = sim.now, cores.free_at()
        if free <= now or now >= deadline:
            then()
        else:
            sim.at(min(free, deadline) - now, check)

    sim.at(min(cores.free_at(), deadline) - sim.now, check)
