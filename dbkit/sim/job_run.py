"""The simulated run a ``SimulatedJob`` drives, made from its config (on the driver's thread), and the
job classes' way to a ``SimulatedJob`` when their ``cluster=`` is a ``dbkit.sim.Cluster``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..config import RunConfig
from ..data import Dataset
from ..nn import Network
from ..runtime.sim.layout import Cluster
from ..telemetry import EventStream
from .downpour import simulated_downpour
from .run import SimulatedRun
from .sandblaster import SimulatedSandblaster

if TYPE_CHECKING:
    from .job import SimulatedJob


def run_config(config: RunConfig) -> RunConfig:
    """The config the simulated run takes: sync SGD as one blocking Downpour replica with n = 1."""
    if config.algorithm != "sgd":
        return config
    return RunConfig.make(algorithm="downpour", model=config.model, dataset=config.dataset, replicas=1,
                          shards=config.shards, n_fetch=1, n_push=1, overlap=False, optimizer=config.optimizer,
                          knobs=tuple(config.rule_settings().items()), lr=config.lr, batch_size=config.batch_size,
                          seed=config.seed, eval_every=config.eval_every,
                          hidden=config.hidden, l2=config.l2)


def make_run(config: RunConfig, network: Network, data: Dataset, cluster: Cluster, events: EventStream,
             on_state: Any) -> SimulatedRun:
    """The run of ``config`` on ``cluster``, driven (its endings told to ``on_state``, its events in ``events``)."""
    kind = SimulatedSandblaster if config.algorithm == "sandblaster" else simulated_downpour
    run = kind(run_config(config), network, data, cluster, events=events, on_state=on_state)
    run.algorithm = config.algorithm  # type: ignore[misc]  # sync SGD reports as itself
    return run


def simulated_job(algorithm: str, cluster: Any, args: tuple, settings: dict[str, Any],
                  base: RunConfig | None = None) -> SimulatedJob | None:
    """The job classes' ``__new__``: a ``SimulatedJob`` when ``cluster`` is a ``dbkit.sim.Cluster``, else ``None``.

    ``args`` are the class's positional ``model`` and ``data``; ``base`` its default settings."""
    if not isinstance(cluster, Cluster):
        return None
    names = ("model", "data")
    if len(args) > len(names):
        raise TypeError(f"takes at most {len(names)} positional arguments (model, data), got {len(args)}")
    given = dict(zip(names, args))
    model = given.get("model", settings.pop("model", "linear" if algorithm == "sandblaster" else "mlp"))
    data = given.get("data", settings.pop("data", "digits"))
    config = settings.pop("config", None) or base
    from .job import SimulatedJob  # (the job imports this file)

    return SimulatedJob(algorithm, model, data, cluster=cluster, config=config, **settings)
