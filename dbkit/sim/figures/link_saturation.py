"""Where the parameter server's links saturate, measured on an emulated cluster beside the simulator's prediction
(issue #47; DistBelief Sec. 4.1: the shards' network is what limits Downpour's replicas).

Downpour on the speech preset with ``n_fetch = n_push = 1``: shards on hosts 1..S, one replica per host after
them, each setting run for real on ``dbkit.emulate.Cluster`` and in the simulator on the cluster's own profile
(``emulated_profile``: the links' rate, a gradient measured on a host). With one shard every replica's fetches
and pushes cross the shard host's one link, so replicas stop adding examples per second once it is full; a
second shard on a host of its own halves each link's share and lifts the ceiling. Where no cluster can be built
(no root, Binder), ``recorded()`` gives a run recorded on a machine that could, labelled as such.
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...emulate import Cluster

RECORDED = Path(__file__).with_name("link_saturation_recorded.json")


@dataclass(frozen=True)
class SaturationPoint:
    """One setting: its examples per second measured and simulated, and the Mbit/s the busier direction of one
    shard host's link carried (fetches out of it, pushes into it)."""

    shards: int
    replicas: int
    examples_per_second: float
    simulated_examples_per_second: float
    shard_link_mbit: float


@dataclass(frozen=True)
class Saturation:
    """A run of ``measure_saturation``: the cluster it ran on, the points, and ``recorded`` (where and when it was
    recorded) when it was read from a file rather than measured here."""

    hosts: int
    link: str
    link_mbit: float
    cpu: float | None
    seconds: float
    gradient_seconds: float
    profile: str
    points: tuple[SaturationPoint, ...]
    recorded: str | None = None

    def curve(self, shards: int, field: str = "examples_per_second") -> tuple[list[int], list[float]]:
        """Replicas and ``field`` of the points with ``shards`` shards, by replicas."""
        points = sorted((p for p in self.points if p.shards == shards), key=lambda p: p.replicas)
        return [p.replicas for p in points], [float(getattr(p, field)) for p in points]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict) -> Saturation:
        try:
            points = tuple(SaturationPoint(**p) for p in raw["points"])
            return cls(**{**raw, "points": points})
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a link-saturation run: {e}") from e


def _point(report: dict, shards: int, simulated: dict) -> SaturationPoint:
    """A setting's point from its real and simulated reports. The link's Mbit/s is over the seconds the
    replicas trained (``train_seconds``), not the job's wall time, which adds placing the shards and starting
    the replicas."""
    moved = max(report["bytes"]["fetched"], report["bytes"]["pushed"]) / shards
    mbit = moved * 8 / 1e6 / max(report["train_seconds"], 1e-9)
    return SaturationPoint(shards, len(report["replicas"]), float(report["examples_per_second"]),
                           float(simulated["examples_per_second"]), mbit)


def measure_saturation(emulated: Cluster, shards: Sequence[int] = (1, 2), replicas: Sequence[int] = (1, 2, 4),
                       seconds: float = 8.0, progress: Callable[[str], None] | None = print) -> Saturation:
    """Run every (shards, replicas) setting on ``emulated`` (started) and in the simulator on its profile.

    Parameters
    ----------
    emulated
        A started ``dbkit.emulate.Cluster``; it needs ``max(shards) + max(replicas)`` hosts.
    shards, replicas
        The settings: each shard and each replica on a host of its own.
    seconds
        Each run's budget (wall seconds for real, simulated seconds in the simulator).
    progress
        Called with a line at each stage (timing the hosts' gradient, each setting's real run, its simulation
        and its result), and the real runs show their progress bars; ``None``: quiet.
    """
    from ...data import load as load_dataset
    from ...downpour.job import DownpourSGD
    from ...emulate.links import parse_rate
    from ...emulate.profile import emulated_profile, gradient_seconds
    from ...runtime.dask import Cluster as DaskCluster
    from ...runtime.sim.layout import Cluster as SimCluster

    if emulated.state is None:
        raise RuntimeError("start the emulated cluster first (with Cluster(...) as emulated: ...)")
    if not shards or not replicas or min(*shards, *replicas) < 1:
        raise ValueError(f"shards and replicas must be counts >= 1, got {list(shards)} and {list(replicas)}")
    if not seconds > 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    hosts = emulated.spec.hosts
    if max(shards) + max(replicas) > hosts:
        raise ValueError(f"{max(shards)} shards and {max(replicas)} replicas need {max(shards) + max(replicas)} "
                         f"hosts, one each; the cluster has {hosts}")
    say = progress or (lambda line: None)
    rounds = []
    for i in range(3):  # the median of three, a line each (a quarter-core host takes seconds to start Python)
        say(f"timing a speech gradient on host 1 under its CPU quota, {i + 1} of 3 (the simulator's profile of "
            "these hosts)")
        rounds.append(gradient_seconds(1, rounds=1))
    grad = statistics.median(rounds)
    profile = emulated_profile(emulated.spec, grad)
    machines = profile.but(machine={"machines": 0})  # each replica and shard on a machine of its own
    knobs: dict[str, Any] = dict(optimizer="adagrad", lr=0.01, n_fetch=1, n_push=1, batch_size=32,
                                 eval_every=10**9)
    data = load_dataset("speech")
    points = []
    with DaskCluster(scheduler=emulated.address) as dask_cluster:
        workers = emulated.workers()
        for s in shards:
            for r in replicas:
                began = time.perf_counter()
                label = f"{s} shard{'s' if s > 1 else ''}, {r} replica{'s' if r > 1 else ''}"
                say(f"{label}: placing them on hosts 1 to {s + r} and training for {seconds:g} s")
                with DownpourSGD("speech", data, client=dask_cluster.client, replicas=r, shards=s,
                                 shard_workers=workers[:s], replica_workers=workers[s:s + r], **knobs) as job:
                    job.fit(seconds=seconds, progress=progress is not None)
                real = job.report()
                say(f"{label}: the same in the simulator, {seconds:g} simulated s")
                simulated: Any = SimCluster(machines)  # (its session() takes the job's keywords by name)
                with DownpourSGD("speech", data, cluster=simulated, replicas=r, shards=s, **knobs) as sim:
                    sim.fit(seconds=seconds, progress=False)
                point = _point(real, s, sim.report())
                points.append(point)
                say(f"{label}: {point.examples_per_second:,.0f} examples/s (simulated "
                    f"{point.simulated_examples_per_second:,.0f}), a shard's link {point.shard_link_mbit:.0f} Mbit/s "
                    f"({time.perf_counter() - began:.0f} s)")
    return Saturation(hosts, emulated.spec.link, parse_rate(emulated.spec.link) / 1e6, emulated.spec.cpu, seconds,
                      grad, profile.name, tuple(points))


def recorded(path: str | Path = RECORDED) -> Saturation:
    """The run recorded with ``record()`` on a machine that could build the emulated cluster (as root:
    ``python -c "from dbkit.sim.figures.link_saturation import record; record()"``); its ``recorded`` says where
    and when."""
    raw = json.loads(Path(path).read_text())
    return Saturation.from_dict(raw)


def record(hosts: int = 8, link: str = "100mbit", cpu: float = 0.25, seconds: float = 10.0,
           path: str | Path = RECORDED) -> Saturation:
    """Measure on a fresh emulated cluster and write the run to ``path`` (needs root)."""
    from dataclasses import replace

    from ...emulate import Cluster

    with Cluster(hosts=hosts, link=link, cpu=cpu) as emulated:
        run = measure_saturation(emulated, shards=(1, 2), replicas=(1, 2, 4, 6), seconds=seconds)
    stamp = f"recorded {time.strftime('%Y-%m-%d')} on {platform.node() or 'a Linux machine'} ({platform.machine()})"
    run = replace(run, recorded=stamp)
    Path(path).write_text(json.dumps(run.to_dict(), indent=1) + "\n")
    return run

