"""Training algorithms as plain classes (numpy only): the sync SGD baseline's trainer, the
Downpour replica (whole or partitioned) and its loop, Sandblaster L-BFGS's coordinator,
dispatcher, replicas and work units. ``dbkit.cluster`` runs them on Dask."""

from .dispatcher import Assignment, Decisions, LostReplica, Slot, UnitDispatcher, UnitRecord, UnitResult
from .downpour import DownpourReplica
from .downpour_partition import DownpourPartition, PartitionStep
from .evaluate import Evaluation, Evaluator, full_batch_loss
from .figures import LIVE, NO_CAP, PartitionFigures, ReplicaCounters, ReplicaFigures, ReplicaSettings
from .lbfgs import HistoryPair, two_loop, two_loop_numpy
from .line_search import wolfe_search
from .partitioned_replica import PartitionedDownpourReplica
from .replica_book import ReplicaBook
from .replica_loop import run_replica_loop
from .sandblaster import Iteration, LBFGSCoordinator
from .sandblaster_replica import SandblasterReplica, SandblasterReplicaFigures
from .schedule import Schedule, StepActions, check_rates
from .sgd import SGDTrainer, TrainingDiverged
from .work_units import LocalBatch, WorkUnit, default_unit_size, make_units

__all__ = [
    "Assignment", "Decisions", "DownpourPartition", "DownpourReplica", "Evaluation", "Evaluator",
    "HistoryPair", "Iteration", "LBFGSCoordinator", "LIVE", "LocalBatch", "LostReplica", "NO_CAP",
    "PartitionFigures", "PartitionStep", "PartitionedDownpourReplica", "ReplicaBook", "ReplicaCounters",
    "ReplicaFigures", "ReplicaSettings", "SGDTrainer", "SandblasterReplica", "SandblasterReplicaFigures",
    "Schedule", "Slot", "StepActions", "TrainingDiverged", "UnitDispatcher", "UnitRecord", "UnitResult",
    "WorkUnit", "check_rates", "default_unit_size", "full_batch_loss", "make_units", "run_replica_loop", "two_loop",
    "two_loop_numpy", "wolfe_search",
]
