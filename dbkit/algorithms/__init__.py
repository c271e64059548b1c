"""Training algorithms as plain classes (numpy only): the sync SGD baseline, the Downpour
SGD replica, and Sandblaster L-BFGS's coordinator and work units; ``dbkit.cluster`` runs
them on Dask."""

from .downpour import DownpourReplica
from .schedule import check_rates
from .evaluate import Evaluator, full_batch_loss
from .lbfgs import HistoryPair, two_loop, two_loop_numpy
from .line_search import wolfe_search
from .sandblaster import LBFGSCoordinator
from .work_units import LocalBatch, WorkUnit, make_units
from .sgd import SyncSGD, TrainingDiverged

__all__ = ["DownpourReplica", "HistoryPair", "LBFGSCoordinator", "LocalBatch", "WorkUnit", "check_rates",
           "make_units", "two_loop", "two_loop_numpy", "wolfe_search", "Evaluator", "SyncSGD", "TrainingDiverged", "full_batch_loss"]
