"""Where a job runs: a session on the machines it was given (in-process or simulated ones), on in-process
workers of its own, or on Dask."""

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
        from ..runtime.inprocess.cluster import admit_transport

        admit_transport(config)
        return InProcessCluster(workers=config.workers).session(tag, closes_cluster=True)
    from ..runtime.dask.cluster import Cluster

    return Cluster(scheduler=config.scheduler, client=client, n_workers=config.workers,
                   threads_per_worker=threads_per_worker)
