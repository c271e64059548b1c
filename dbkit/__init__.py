"""dbkit: DistBelief (Dean et al., NIPS 2012) on Dask, for teaching and experiments.

Importing ``dbkit`` is cheap and loads no dask (it registers dbkit's own update rules and
replica loops, ``registered.py``): the subpackages ``dbkit.nn``,
``dbkit.data``, ``dbkit.ps``, ``dbkit.partition``, ``dbkit.downpour``, ``dbkit.sandblaster`` and ``dbkit.sync_sgd``
are numpy only, and the jobs load what they need when first used.

The jobs, all driven the same way (``start``, ``fit``, ``pause``, ``resume``,
``set``, ``stop``, ``history``, ``events``, ``snapshot()``, ``report()``):
``SyncSGD``, ``DownpourSGD``, ``SandblasterLBFGS``. ``run(config)`` runs the
job a ``RunConfig`` describes and returns its report; ``stop_all()`` stops
every job of this process.
"""

__version__ = "0.1.0"

_LAZY = {
    "Cluster": ("dbkit.runtime.dask.cluster", "Cluster"),
    "DownpourSGD": ("dbkit.downpour", "DownpourSGD"),
    "SandblasterLBFGS": ("dbkit.sandblaster", "SandblasterLBFGS"),
    "SyncSGD": ("dbkit.sync_sgd.job", "SyncSGD"),
    "RunConfig": ("dbkit.config", "RunConfig"),
    "run": ("dbkit.runner", "run"),
    "make_job": ("dbkit.runner", "make_job"),
    "stop_all": ("dbkit.jobs.running", "stop_all"),
    "build_model": ("dbkit.nn", "build"),
    "load_dataset": ("dbkit.data", "load"),
}

__all__ = sorted(_LAZY)

from . import registered  # noqa: E402,F401  dbkit's own rules and replica loops, by name


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dbkit' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
