"""Downpour SGD on Dask (DistBelief Sec. 4.1): the job and its parts (placement, fleet, monitor)."""

from .job import DownpourSGD

__all__ = ["DownpourSGD"]
