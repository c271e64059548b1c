"""The live control panel (ipywidgets) and its plots (matplotlib): the only package that imports ipywidgets.

``dbkit.widgets.panel(job)``, or ``job.panel()``, returns the panel bound to a
job (the same one on every call). Imported only when a panel is asked for.
"""

from __future__ import annotations

from typing import Any

from .live_figure import LiveFigure
from .panel import Panel
from .series import Marker, RunSeries
from .steering import Steering

__all__ = ["LiveFigure", "Marker", "Panel", "RunSeries", "Steering", "panel"]


def panel(job: Any) -> Panel:
    """The control panel of ``job``: the one it has, or a new one."""
    existing = getattr(job, "attached_panel", None)
    if existing is not None and not existing.closed:
        return existing
    return Panel(job)
