"""Run telemetry: the live event stream, the JSON report of DESIGN.md, and PNG plots.

``events``, ``sampler`` and ``report`` import numpy only; the plots load
matplotlib when they draw.
"""

from .events import (
                     BatchDone,
                     ByteCounts,
                     Change,
                     Divergence,
                     ErrorEvent,
                     Event,
                     EventStream,
                     Relayout,
                     ReplicaEvent,
                     Sample,
                     StateChange,
)
from .partition_plot import plot_partitions
from .plot import plot_history
from .report import REQUIRED, RunRecord, build_report, validate_report, write_report
from .sampler import Sampler

__all__ = ["BatchDone", "ByteCounts", "Change", "Divergence", "ErrorEvent", "Event", "EventStream", "REQUIRED",
           "Relayout", "ReplicaEvent", "RunRecord", "Sample", "Sampler", "StateChange", "build_report",
           "plot_history", "plot_partitions", "validate_report", "write_report"]
