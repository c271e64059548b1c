"""Sandblaster L-BFGS on Dask (DistBelief Sec. 4.2): the job, its batches of work units, its tasks."""

from .job import SandblasterLBFGS

__all__ = ["SandblasterLBFGS"]
