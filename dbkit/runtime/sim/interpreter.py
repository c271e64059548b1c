"""When a thread woken by a message gets to run on a host whose cores are all computing.

A simulated machine of the ``here`` profile is a worker process on a host of two cores: one Python thread
of it runs at a time. A request or a reply that reaches it while every core of the host is computing (each
worker's replica stepping) waits until a computation pauses -- a replica waiting for its previous push or a
fetch -- or until Python's switch interval (``switch_seconds``, ``sys.getswitchinterval()``: 5 ms) makes a
computing thread let go. Replicas computing step after step thus delay the shards beside them by up to the
switch interval: in real LocalCluster runs this is why staleness grows at large n_push (answers come back
later than 16 short steps) and why replicas sharing a worker stall on their previous push. A host with an
idle core (one replica on two workers) takes a message at once; machines with ``switch_seconds = 0`` (the
paper's) take such work first come, first served.
"""

from __future__ import annotations

from collections.abc import Callable

from .engine import Simulation
from .machines import Machine


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
