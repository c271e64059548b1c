"""Messages that cross a NIC at once share it, as TCP flows through one link do (max-min fair).

The first-come-first-served NIC of ``machines.Network`` sends one message at a time at the full rate. Real
flows through a shaped link do not queue behind each other: they share the link, and all of them finish late
together. That changes what overlaps. A replica pushing to S shards at once through its own link gets every
slice to its shard only at the end, so no shard's answer comes back while the other slices still go out
(first come, first served pipelines them); R replicas pushing to one shard at once all wait for the last
byte, then all fetch at once, so the shard's link carries one direction at a time. Measured on the emulated
cluster (``dbkit.emulate``, issue #47), where the first-come-first-served simulator was 18-51% fast exactly in
such settings, while one or several bulk flows through a shaped link carry 96% of its rate whatever their
number (so the link's rate is not what is lost: what overlaps is).

The rates are max-min fair (progressive filling): every flow gets an equal share of its tighter NIC, and
what a flow limited elsewhere leaves is shared by the others. They are worked out again whenever a flow
starts or ends, and each flow's end is an event that is moved then.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .engine import Simulation


class Machine(Protocol):
    """What a flow needs of a machine (``machines.Machine`` is one): its NIC's rate each way and its counters."""

    bandwidth: float
    tx_busy: float
    rx_busy: float
    bytes_sent: int
    bytes_received: int
    messages_sent: int


MIN_RATE = 1e-9  # bytes/s: a flow's rate is never 0, so its end is a time (moved when a flow ends)


@dataclass(eq=False)
class Flow:
    """One message on the wire: ``left`` bytes still to go from ``src`` to ``dst`` at ``rate`` bytes/s;
    ``then()`` runs ``after`` seconds past its last byte (the network's latency and any extra)."""

    src: Machine
    dst: Machine
    left: float
    then: Callable[[], None]
    after: float
    rate: float = 0.0
    cancel: Callable[[], None] | None = None


def fair_rates(flows: list[Flow]) -> list[float]:
    """Max-min fair rates of ``flows``, each crossing its sender's NIC (out) and its receiver's (in), each
    NIC ``bandwidth`` bytes/s each way: the NIC whose equal share is smallest is filled first, its flows
    fixed at that share, and what is left of their other NIC shared among that NIC's other flows."""
    capacity: dict[tuple[int, str], float] = {}
    members: dict[tuple[int, str], list[int]] = {}
    for i, f in enumerate(flows):
        for key, machine in (((id(f.src), "tx"), f.src), ((id(f.dst), "rx"), f.dst)):
            capacity.setdefault(key, machine.bandwidth)
            members.setdefault(key, []).append(i)
    rates = [0.0] * len(flows)
    fixed = [False] * len(flows)
    open_count = {key: len(ids) for key, ids in members.items()}
    while True:
        live = [(capacity[k] / n, k) for k, n in open_count.items() if n > 0]
        if not live:
            return rates
        share, tightest = min(live, key=lambda x: x[0])
        share = max(share, MIN_RATE)  # (a NIC filled to the last float by rounding: its flows wait for a change)
        for i in members[tightest]:
            if fixed[i]:
                continue
            fixed[i], rates[i] = True, share
            f = flows[i]
            for key in ((id(f.src), "tx"), (id(f.dst), "rx")):
                capacity[key] = max(0.0, capacity[key] - share)
                open_count[key] -= 1


class SharedLinks:
    """The messages in flight on a simulation's network, sharing NICs max-min fairly (``fair_rates``).
    Owns its flows; runs on the simulation's one loop, so it needs no lock."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.flows: list[Flow] = []
        self._updated = 0.0

    def send(self, start: float, src: Machine, dst: Machine, nbytes: int, after: float,
             then: Callable[[], None]) -> None:
        """Start sending ``nbytes`` from ``src`` to ``dst`` at virtual time ``start`` (now or later);
        ``then()`` runs ``after`` seconds after its last byte has left."""
        src.bytes_sent += nbytes
        dst.bytes_received += nbytes
        src.messages_sent += 1
        flow = Flow(src, dst, float(nbytes), then, after)
        if start > self.sim.now:
            self.sim.at(start - self.sim.now, lambda: self._join(flow))
        else:
            self._join(flow)

    def _join(self, flow: Flow) -> None:
        self._advance()
        self.flows.append(flow)
        self._reshare()

    def _advance(self) -> None:
        """Move every flow on by the bytes its rate sent since the last change; count the NICs' busy time."""
        now = self.sim.now
        dt, self._updated = now - self._updated, now
        if dt <= 0:
            return
        for f in self.flows:
            sent = f.rate * dt
            f.left -= sent
            f.src.tx_busy += sent / f.src.bandwidth
            f.dst.rx_busy += sent / f.dst.bandwidth

    def _reshare(self) -> None:
        for f, rate in zip(self.flows, fair_rates(self.flows)):
            if f.cancel is not None and rate == f.rate:
                continue  # its end stays where it was
            if f.cancel is not None:
                f.cancel()
            f.rate = rate
            f.cancel = self.sim.timeout(max(0.0, f.left) / rate, self._ender(f))

    def _ender(self, flow: Flow) -> Callable[[], None]:
        return lambda: self._end(flow)

    def _end(self, flow: Flow) -> None:
        self._advance()
        self.flows.remove(flow)
        flow.left, flow.cancel = 0.0, None
        self._reshare()
        if flow.after > 0:
            self.sim.at(flow.after, flow.then)
        else:
            flow.then()
