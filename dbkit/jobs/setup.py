"""What every job does first: settle its config, load its data, build its network."""

from __future__ import annotations

import os
from typing import Any

from ..config import RunConfig
from ..data import Dataset, load
from ..nn import Network, build


def resolve_job(algorithm: str, model: str | Network, data: str | os.PathLike[str] | Dataset, base: RunConfig | None,
                given: dict[str, Any]) -> tuple[RunConfig, Dataset, Network]:
    """The validated config, the dataset and the network of a job.

    ``model`` and ``data`` are names (recorded in the config) or ready objects;
    ``given`` holds flat keyword settings, ``None`` meaning "not given";
    ``base`` is the config they change (default: ``RunConfig`` for ``algorithm``).
    """
    if not isinstance(model, (str, Network)):
        raise TypeError(f"model must be a preset name or a dbkit.nn.Network, got {type(model).__name__}")
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if not isinstance(data, (str, Dataset)):
        raise TypeError(f"data must be a dataset name, a path or a dbkit.data.Dataset, got {type(data).__name__} "
                        "(for arrays: dbkit.data.Dataset(X_train, y_train, X_test, y_test))")
    changes = {k: v for k, v in given.items() if v is not None}
    changes["algorithm"] = algorithm
    if isinstance(model, str):
        changes["model"] = model
    if isinstance(data, str):
        changes["dataset"] = data
    config = (base or RunConfig()).replace(**changes)
    dataset = data if isinstance(data, Dataset) else load(config.dataset, seed=config.seed)
    network = model if isinstance(model, Network) else build(
        config.model, dataset.n_features, dataset.n_classes, hidden=config.hidden, l2=config.l2,
        image_shape=dataset.image_shape)
    check_size(network)
    if network.in_size != dataset.n_features:
        raise ValueError(f"the network takes {network.in_size} inputs, the data has {dataset.n_features}")
    return config, dataset, network


def job_from_checkpoint(cls: Any, path: str | os.PathLike[str], saved: dict[str, Any], model: Any, data: Any,
                        client: Any, scheduler: str | None, settings: dict[str, Any]) -> Any:
    """A job of ``cls`` (not started) that goes on from the checkpoint in ``path``: the ``saved`` settings
    (those it was written with) changed by ``settings``, its model and data unless given."""
    config = RunConfig.make(**{**saved, **settings})
    job = cls(model if model is not None else config.model, data if data is not None else config.dataset,
              config=config, client=client, scheduler=scheduler)
    return job.start_from(path)


MAX_PARAMETERS = 2**28  # 1 GiB per float32 copy; a run holds several copies in each process


def check_size(network: Network) -> None:
    """Refuse, before anything is allocated, a network too large to train here."""
    if network.size > MAX_PARAMETERS:
        gib = network.size * 4 / 2**30
        raise ValueError(f"model {network.name} would have {network.size:,} parameters, {gib:,.1f} GiB per copy "
                         f"(the shards, every replica, Adagrad and the gradients each hold one); dbkit takes at "
                         f"most {MAX_PARAMETERS:,}: use smaller --hidden widths")
