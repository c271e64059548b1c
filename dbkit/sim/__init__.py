"""The second runtime: dbkit's own replicas, shards and dispatcher in virtual time, at the paper's scale.

``Cluster(profile, machines)`` describes simulated machines; ``simulate(config,
cluster)`` runs the job ``config`` describes on them and returns the same JSON
report a real run writes, marked ``"simulated": true`` with its profile.
Given as ``cluster=`` to ``dbkit.DownpourSGD``, ``SandblasterLBFGS`` or
``SyncSGD``, the job runs on it as itself: the same start, fit, pause, resume,
set, stop, events, snapshot and report, in simulated seconds, in the background
(the session is ``dbkit.runtime.sim.job_session.JobSession``). Numpy and greenlet
only: no Dask.
"""

from ..runtime.sim.cost import CostModel
from ..runtime.sim.engine import Simulation, SimulationError
from ..runtime.sim.layout import Cluster
from ..runtime.sim.profile import Profile, ProfileError
from ..runtime.sim.profile import load as load_profile
from ..runtime.sim.shape import ModelShape
from .api import simulate, simulated_run

__all__ = ["Cluster", "CostModel", "ModelShape", "Profile", "ProfileError", "Simulation",
           "SimulationError", "load_profile", "simulate", "simulated_run"]
