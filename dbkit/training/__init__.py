"""What every training algorithm here shares: a replica's figures and settings, and evaluation.

``ReplicaFigures`` (what a replica counts: steps, examples, fetches, pushes, staleness), ``ReplicaSettings``
(what may change while it runs), ``PartitionFigures``, and ``Evaluator`` / ``Evaluation`` (loss and
accuracy on held-out data). Plain numpy, used by Downpour, Sandblaster, sync SGD and the simulator.
"""

from .evaluate import Evaluation, Evaluator, full_batch_loss
from .figures import LIVE, NO_CAP, PartitionFigures, ReplicaCounters, ReplicaFigures, ReplicaSettings

__all__ = ["Evaluation", "Evaluator", "LIVE", "NO_CAP", "PartitionFigures", "ReplicaCounters", "ReplicaFigures",
           "ReplicaSettings", "full_batch_loss"]
