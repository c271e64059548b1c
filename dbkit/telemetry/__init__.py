"""Run telemetry: events, the JSON report of DESIGN.md, and PNG plots (history, partitions)."""

from .events import EventLog
from .partition_plot import plot_partitions
from .plot import plot_history
from .report import REQUIRED, build_report, validate_report, write_report

__all__ = ["EventLog", "REQUIRED", "build_report", "plot_history", "plot_partitions", "validate_report", "write_report"]
