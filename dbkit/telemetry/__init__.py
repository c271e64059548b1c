"""Run telemetry: events, the JSON report of DESIGN.md, and a PNG plot."""

from .events import EventLog
from .plot import plot_history
from .report import REQUIRED, build_report, validate_report, write_report

__all__ = ["EventLog", "REQUIRED", "build_report", "plot_history", "validate_report", "write_report"]
