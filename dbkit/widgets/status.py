"""The panel's status line and text summary, in words, from a job's ``Snapshot``. Plain Python."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from .series import change_label

if TYPE_CHECKING:
    from ..jobs import Snapshot

BOKEH_HINT = ("the Dask dashboard is not served: install bokeh>=3.1 where the scheduler runs "
              "(pip install 'bokeh>=3.1'), then start the job again")


def summary(s: Snapshot, reached: float | None = None, rate: float | None = None) -> str:
    """One line: state, replicas, steps, examples per second, the last evaluation, and the time the
    target accuracy was ``reached`` (seconds; ``None``: not yet) when the run has a target.

    ``rate``: examples per second over the last few samples (the panel's plotted rate); without it,
    the last sample's own."""
    parts = [s.state]
    if s.algorithm != "sgd":
        parts.append(f"{s.live_replicas} of {s.config.replicas} replicas live")
    parts.append(f"step {s.step:,}" if s.algorithm != "sandblaster" else f"iteration {s.step}")
    if s.sample is not None and s.state == "running":
        total = s.sample.examples_per_second if rate is None else rate
        per = f" ({total / s.live_replicas:,.0f} per replica)" if s.live_replicas > 1 else ""
        parts.append(f"{total:,.0f} examples/s{per}")
    if s.evaluation is not None:
        parts.append(f"test accuracy {s.evaluation.test_accuracy:.3f}, loss {s.evaluation.test_loss:.3f}")
    target = s.config.target_accuracy
    if target is not None:
        parts.append(f"{target:.0%} reached at {reached:.1f} s" if reached is not None else f"target {target:.0%}")
    return " · ".join(parts)


def last_change(s: Snapshot) -> str:
    """The latest change in words: what, and how long after it was asked it was applied."""
    c = s.last_change
    if c is None:
        return ""
    if c.superseded:
        return f"{c.setting}={c.new!r} was overtaken by a later value"
    if c.applied is None:
        return ""
    what = "paused" if c.setting == "paused" and c.new else "resumed" if c.setting == "paused" else change_label(
        c.setting, c.old, c.new)
    return f"{what}: applied {c.applied - c.asked:.2f} s after it was asked"


def status_html(s: Snapshot, note: str = "", error: bool = False, reached: float | None = None,
                rate: float | None = None, setback: str | None = None) -> str:
    """The status line: the summary, then the panel's ``note`` (an error in red) or the last change,
    a ``setback`` (accuracy fallen well below its best, in red), the job's last error, and what is
    still being applied."""
    lines = [f"<b>{html.escape(summary(s, reached, rate))}</b>"]
    if note:
        colour = "#b00020" if error else "#1b5e20"
        lines.append(f"<span style='color:{colour}'>{html.escape(note)}</span>")
    elif change := last_change(s):
        lines.append(html.escape(change))
    if setback and s.state in ("running", "paused"):
        lines.append(f"<span style='color:#b00020'>{html.escape(setback)}</span>")
    if s.simulation is not None:
        lines.append(html.escape(s.simulation.describe()))
    if s.changing:
        lines.append("applying " + html.escape(", ".join(f"{k}={v!r}" for k, v in s.changing.items())) + " …")
    if s.last_error and s.state in ("failed", "diverged"):
        lines.append(f"<span style='color:#b00020'>{html.escape(s.last_error)}</span>")
    return "<br>".join(lines)


def dashboard_html(s: Snapshot) -> str:
    """A link to the Dask dashboard, or how to get one."""
    if s.simulation is not None:
        return f"simulated on profile {html.escape(s.simulation.profile)}: no Dask cluster, no dashboard"
    if s.dashboard:
        url = html.escape(s.dashboard, quote=True)
        return f"<a href='{url}' target='_blank'>Dask dashboard</a> (task stream, workers, memory)"
    if s.state == "created":
        return "the Dask dashboard link appears when the job starts"
    if s.algorithm == "sgd" and not s.config.sgd.on_cluster:
        return "in memory: no Dask cluster, no dashboard"
    return html.escape(BOKEH_HINT)
