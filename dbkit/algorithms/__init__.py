"""Training algorithms as plain classes (numpy only): the sync SGD baseline and the
Downpour SGD replica; ``dbkit.cluster`` runs them on Dask."""

from .downpour import DownpourReplica, check_rates
from .evaluate import Evaluator, full_batch_loss
from .sgd import SyncSGD, TrainingDiverged

__all__ = ["DownpourReplica", "check_rates", "Evaluator", "SyncSGD", "TrainingDiverged", "full_batch_loss"]
