"""dbkit's own update rules and replica loops, registered when ``dbkit`` is imported.

Each module registers what it holds as it is first imported (``register_rule``,
``register_replica``): SGD and Adagrad, Downpour's own loop, and the
descendants in ``dbkit.after``; and the simulated partition, which a
simulated session places where a partition actor is asked for. Importing them here, at the top of the house,
is what lets ``dbkit.ps`` and ``dbkit.downpour`` look a name up without
importing upward to find it.
"""

from . import after  # noqa: F401  SSP, EASGD, DiLoCo, backup sync, staleness-aware
from .downpour import replica  # noqa: F401  Downpour's own loop
from .partition import simulated  # noqa: F401  the partition a simulated session places (its stand-in)
from .ps import rules  # noqa: F401  SGD, Adagrad
