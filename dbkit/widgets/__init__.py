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

__all__ = ["LiveFigure", "Marker", "Panel", "RunSeries", "Steering", "keep_last_frames", "panel"]


def panel(job: Any) -> Panel:
    """The control panel of ``job``: the one it has, or a new one."""
    existing = getattr(job, "attached_panel", None)
    if existing is not None and not existing.closed:
        return existing
    return Panel(job)


def keep_last_frames() -> int:
    """Every panel of a job still running (or paused) in this process keeps its latest frame as its static
    view, so that a notebook saved now shows the panels as they are (``docs/render_lessons.py`` calls it
    after a lesson's last cell); returns how many panels."""
    from ..jobs.running import running

    panels = [j.attached_panel for j in running() if getattr(j, "attached_panel", None) is not None]
    for p in panels:
        p.keep_frame()
    return len(panels)
