"""dbkit: DistBelief (Dean et al., NIPS 2012) on Dask, for teaching and experiments.

Importing ``dbkit`` is cheap and loads no dask: the subpackages ``dbkit.nn``,
``dbkit.data``, ``dbkit.ps`` and ``dbkit.algorithms`` are numpy only, and
``dbkit.cluster`` (the only place that knows Dask) loads when first used.
"""

__version__ = "0.1.0"

_LAZY = {
    "Cluster": ("dbkit.cluster", "Cluster"),
    "DownpourSGD": ("dbkit.cluster.downpour", "DownpourSGD"),
    "SandblasterLBFGS": ("dbkit.cluster.sandblaster", "SandblasterLBFGS"),
    "RunConfig": ("dbkit.config", "RunConfig"),
    "SyncSGD": ("dbkit.algorithms", "SyncSGD"),
    "build_model": ("dbkit.nn", "build"),
    "load_dataset": ("dbkit.data", "load"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'dbkit' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
