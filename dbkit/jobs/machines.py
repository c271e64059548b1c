"""Where a job runs: a session on the machines it was given, on in-process workers of its own, or on Dask;
or, given simulated machines, a simulated job instead (``new_job``)."""

from __future__ import annotations

from typing import Any

from ..config import RunConfig
from ..runtime.protocol import ClusterFactory, Runtime


def open_session(config: RunConfig, machines: ClusterFactory | None, client: Any, tag: str,
                 threads_per_worker: int = 1, network: Any = None) -> Runtime:
    """The job's session: on ``machines`` (``cluster=``, left running after the job), on ``config.workers``
    in-process workers of the job's own (``runtime="in-process"``, closed with it), or on Dask (``client``,
    ``config.scheduler``, or a LocalCluster of ``config.workers`` processes)."""
    if machines is not None:
        return machines.session(tag, network=network, config=config)
    if config.runtime == "in-process":
        from ..runtime.inprocess import InProcessCluster

        return InProcessCluster(workers=config.workers).session(tag, closes_cluster=True)
    from ..runtime.dask.cluster import Cluster

    return Cluster(scheduler=config.scheduler, client=client, n_workers=config.workers,
                   threads_per_worker=threads_per_worker)


def new_job(cls: type, args: tuple, cluster: Any, settings: dict[str, Any], base: RunConfig | None) -> Any:
    """The job classes' ``__new__``: a ``dbkit.sim.SimulatedJob`` (the same interface, in simulated time) when
    ``cluster`` is a ``dbkit.sim.Cluster``, else a new, not yet initialised, ``cls``."""
    from ..runtime.sim.layout import Cluster as SimulatedCluster

    if isinstance(cluster, SimulatedCluster):
        from ..sim.job_run import simulated_job

        job = simulated_job(cls.algorithm, cluster, args, settings, base)  # type: ignore[attr-defined]
        if job is not None:
            return job
    return object.__new__(cls)
