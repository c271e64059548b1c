"""Training algorithms as plain classes (numpy only): the sync SGD baseline for now;
Downpour SGD, Sandblaster L-BFGS and partitioning build on the same pieces."""

from .evaluate import Evaluator, full_batch_loss
from .sgd import SyncSGD, TrainingDiverged

__all__ = ["Evaluator", "SyncSGD", "TrainingDiverged", "full_batch_loss"]
