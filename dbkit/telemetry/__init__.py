"""Run telemetry: the live event stream, the JSON report of DESIGN.md, and PNG plots.

``events``, ``sampler`` and ``report`` import numpy only; the plots load
matplotlib when they draw.
"""

from .accuracy import LADDER, TimeToAccuracy, time_to_accuracy, times_to_accuracy
from .compare import Chart, compare_runs, diverged_at, plot_lines, plot_timelines
from .events import (
                     BatchDone,
                     ByteCounts,
                     Change,
                     Checkpointed,
                     Divergence,
                     ErrorEvent,
                     Event,
                     EventStream,
                     Relayout,
                     ReplicaEvent,
                     Sample,
                     ShardLost,
                     StateChange,
                     WorkerHung,
                     WorkerSilent,
)
from .faults_block import faults_block
from .partition_plot import plot_partitions
from .plot import plot_history
from .rate import trailing_rate
from .report import REQUIRED, RunRecord, build_report, validate_report, write_report
from .sampler import Sampler, history
from .sandblaster_block import sandblaster_block
from .summary import RunSummary, SummaryTable, summarize

__all__ = [
    "BatchDone", "ByteCounts", "Change", "Checkpointed", "ShardLost", "Chart", "Divergence", "ErrorEvent", "Event",
    "EventStream", "LADDER", "REQUIRED", "Relayout", "ReplicaEvent", "RunRecord", "Sample", "Sampler", "StateChange",
    "TimeToAccuracy", "build_report", "compare_runs", "diverged_at", "plot_history", "plot_lines", "plot_partitions",
    "plot_timelines", "time_to_accuracy", "times_to_accuracy", "RunSummary", "SummaryTable", "summarize",
    "validate_report", "write_report", "history", "sandblaster_block", "faults_block", "WorkerHung", "WorkerSilent",
    "trailing_rate",
]
