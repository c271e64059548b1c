"""What every job does first: settle its config, load its data, build its network."""

from __future__ import annotations

import os
from typing import Any

from ..config import RunConfig
from ..data import Dataset, load
from ..nn import Network, build
from ..settings import KNOBS, SETTINGS


def resolve_job(algorithm: str, model: str | Network, data: str | os.PathLike[str] | Dataset, base: RunConfig | None,
                given: dict[str, Any], fit: bool = True) -> tuple[RunConfig, Dataset, Network]:
    """The validated config, the dataset and the network of a job.

    ``model`` and ``data`` are names (recorded in the config) or ready objects;
    ``given`` holds flat keyword settings, ``None`` meaning "not given" (but for an optional knob of a rule or
    loop, where it is a value: SSP's ``max_staleness=None``, unbounded);
    ``base`` is the config they change (default: ``RunConfig`` for ``algorithm``);
    ``fit``: check that the data and the network can hold the settings (``check_fit``).
    """
    if not isinstance(model, (str, Network)):
        raise TypeError(f"model must be a preset name or a dbkit.nn.Network, got {type(model).__name__}")
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if not isinstance(data, (str, Dataset)):
        raise TypeError(f"data must be a dataset name, a path or a dbkit.data.Dataset, got {type(data).__name__} "
                        "(for arrays: dbkit.data.Dataset(X_train, y_train, X_test, y_test))")
    # None is "not given", except for an optional knob, which no job names as a keyword of its own: there it
    # was asked for (``replica="ssp", max_staleness=None``: unbounded)
    changes = {k: v for k, v in given.items()
               if v is not None or (k in SETTINGS and SETTINGS[k].section == KNOBS and SETTINGS[k].optional)}
    _check_section(algorithm, changes)
    changes["algorithm"] = algorithm
    if isinstance(model, str):
        changes["model"] = model
    if isinstance(data, str):
        changes["dataset"] = data
    config = (base or RunConfig()).replace(**changes)
    dataset = data if isinstance(data, Dataset) else load(config.dataset, seed=config.seed,
                                                          max_bytes=int(config.max_data_gib * 2**30))
    network = model if isinstance(model, Network) else build(
        config.model, dataset.n_features, dataset.n_classes, hidden=config.hidden, l2=config.l2,
        image_shape=dataset.image_shape)
    check_size(network)
    if network.in_size != dataset.n_features:
        raise ValueError(f"the network takes {network.in_size} inputs, the data has {dataset.n_features}")
    if fit:
        check_fit(config, dataset, network)
    return config, dataset, network


def _check_section(algorithm: str, changes: dict[str, Any]) -> None:
    """Refuse another algorithm's setting (``DownpourSGD(memory=5)``): it would be dropped unread."""
    # a knob belongs to a rule or a loop, not to an algorithm: the config checks it is the chosen one's
    other = sorted(k for k in changes if k in SETTINGS and SETTINGS[k].section not in (None, algorithm, KNOBS))
    if other:
        owners = ", ".join(f"{k} ({SETTINGS[k].section})" for k in other)
        raise ValueError(f"{algorithm} does not take {owners}: each is another algorithm's setting")


def check_fit(config: RunConfig, dataset: Dataset, network: Network) -> None:
    """Refuse, before anything starts, settings the data or the network cannot hold: more shards than
    parameters, more replicas than training examples (each replica needs a data shard of its own), a
    mini-batch larger than the training set, a slow replica that is not one of the replicas."""
    if config.shards > network.size:
        raise ValueError(f"shards must be at most the network's {network.size:,} parameters (each shard holds at "
                         f"least one), got {config.shards}")
    if config.algorithm == "downpour" and config.replicas > dataset.n_train:
        raise ValueError(f"replicas must be at most the {dataset.n_train:,} training examples (each replica trains "
                         f"on a data shard of its own), got {config.replicas}")
    if config.batch_size > dataset.n_train:
        raise ValueError(f"batch_size must be at most the {dataset.n_train:,} training examples, got "
                         f"{config.batch_size}")
    beyond = sorted(i for i, _ in config.slow_replicas if i >= config.replicas)
    if beyond:
        raise ValueError(f"slow_replicas names replica {beyond[0]}, but the replicas are 0 to {config.replicas - 1}")


def job_from_checkpoint(cls: Any, path: str | os.PathLike[str], saved: dict[str, Any], model: Any, data: Any,
                        where: dict[str, Any], settings: dict[str, Any]) -> Any:
    """A job of ``cls`` (not started) that goes on from the checkpoint in ``path``: the ``saved`` settings
    (those it was written with) changed by ``settings``, its model and data unless given, on the machines
    ``where`` names (``client=``, ``scheduler=`` or ``cluster=``)."""
    config = RunConfig.make(**{**saved, **settings})
    job = cls(model if model is not None else config.model, data if data is not None else config.dataset,
              config=config, **where)
    return job.start_from(path)


MAX_PARAMETERS = 2**28  # 1 GiB per float32 copy; a run holds several copies in each process


def check_size(network: Network) -> None:
    """Refuse, before anything is allocated, a network too large to train here."""
    if network.size > MAX_PARAMETERS:
        gib = network.size * 4 / 2**30
        raise ValueError(f"model {network.name} would have {network.size:,} parameters, {gib:,.1f} GiB per copy "
                         f"(the shards, every replica, Adagrad and the gradients each hold one); dbkit takes at "
                         f"most {MAX_PARAMETERS:,}: use smaller --hidden widths")
