"""``simulate(config, cluster)``: the job a ``RunConfig`` describes, in virtual time, and its report."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..jobs import resolve_job
from ..nn import Network
from ..runtime.sim.layout import Cluster
from ..runtime.sim.memory import check_memory
from ..runtime.sim.shape import ModelShape
from .job_run import JOBS, JobRun


def simulated_run(config: RunConfig, cluster: Cluster | None = None, *, network: Network | None = None,
                  data: Dataset | str | os.PathLike[str] | None = None, shape: str | ModelShape | None = None,
                  cost_only: bool = False, **options: Any) -> Any:
    """The simulated run of ``config`` (Downpour or Sandblaster) on ``cluster`` (default: ``Cluster()``, the
    ``here`` profile), not yet run; ``shape`` names the model whose arithmetic and bytes are charged
    (default: the network's own).

    ``cost_only``: no arrays of the model's size. dbkit's classes run on a stand-in (the linear model on
    the digits) while every computation, message and shard service is charged for ``shape``: time, bytes,
    queues and staleness for models of billions of parameters, and no accuracy.
    """
    if config.algorithm not in JOBS:
        raise ValueError(f"the simulator runs {' and '.join(JOBS)}; {config.algorithm} is the single-process "
                         "baseline (dbkit run sgd)")
    for setting, value in (("scheduler", config.scheduler), ("checkpoint_dir", config.checkpoint_dir)):
        if value is not None:
            raise ValueError(f"{setting} does not apply to a simulation (it runs no Dask cluster and loses no machine)")
    cluster = cluster or Cluster()
    model = ModelShape.named(shape) if isinstance(shape, str) else shape
    if cost_only:
        if config.algorithm == "downpour" and config.downpour.partitions > 1:
            raise ValueError("cost-only runs whole replicas; for partitioned ones, their step is costed by "
                             "dbkit simulate fig3 (or simulate with numerics)")
        config, costed_data, named = resolve_job(config.algorithm, network if network is not None else config.model,
                                                 data if data is not None else config.dataset, config, {}, fit=False)
        model = model or ModelShape.of(named)  # (a preset is small; a named shape is never built)
        _, stand_in_data, stand_in = resolve_job(config.algorithm, "linear", "digits", config, {}, fit=False)
        if config.algorithm == "downpour":  # a data shard of a full batch for every replica: the batch asked
            stand_in_data = _repeated(stand_in_data, config.replicas * config.batch_size)
        else:  # Sandblaster's batch is the whole training set: as many examples (and work units) as the costed data
            stand_in_data = _repeated(stand_in_data, costed_data.n_train, exactly=True)
        if config.shards > model.parameters:
            raise ValueError(f"shards must be at most the model's {model.parameters:,} parameters, got {config.shards}")
        return _run(config, stand_in, stand_in_data, cluster, model, True, options)
    config, dataset, net = resolve_job(config.algorithm, network if network is not None else config.model,
                                       data if data is not None else config.dataset, config, {})
    check_memory(max(net.size, model.parameters if model else 0), config.replicas, config.algorithm,
                 config.sandblaster.memory)
    return _run(config, net, dataset, cluster, model, False, options)


def _repeated(data: Dataset, n_train: int, exactly: bool = False) -> Dataset:
    """``data`` with its training examples repeated to at least ``n_train`` (``exactly``: cut to ``n_train``
    too). A cost-only stand-in: its numbers are never read, but each replica's step computes a batch of the
    size asked, and each Sandblaster batch as many work units as the costed data's."""
    if data.n_train == n_train or (data.n_train > n_train and not exactly):
        return data
    times = -(-n_train // data.n_train)
    X, y = np.tile(data.X_train, (times, 1)), np.tile(data.y_train, times)
    if exactly:
        X, y = X[:n_train], y[:n_train]
    return Dataset(X, y, data.X_test, data.y_test, name=data.name, image_shape=data.image_shape,
                   n_classes=data.n_classes)


def _run(config: RunConfig, network: Network, data: Dataset, cluster: Cluster, shape: ModelShape | None,
         cost_only: bool, options: dict[str, Any]) -> Any:
    """The job itself on ``cluster``, charged as ``shape`` (``JobRun``)."""
    cluster = dataclasses.replace(cluster, shape=shape, cost_only=cost_only,
                                  jitter=options.pop("jitter", cluster.jitter),
                                  stack_gradients=options.pop("stack_gradients", cluster.stack_gradients))
    return JobRun(config, network, data, cluster, **options)


def simulate(config: RunConfig, cluster: Cluster | None = None, **kwargs: Any) -> dict:
    """Simulate ``config`` on ``cluster`` and return its report (``"simulated": true``, with the profile)."""
    return simulated_run(config, cluster, **kwargs).run()
