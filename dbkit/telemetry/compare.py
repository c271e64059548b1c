"""Side-by-side pictures for the lessons: runs against each other, measured curves, Sandblaster batches.

Each function returns a ``Chart``: a matplotlib ``Figure`` (no pyplot, so
nothing stays alive and any backend works) that a notebook shows as a PNG and
that can be saved. matplotlib loads only when a chart is drawn.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .accuracy import time_to_accuracy
from .events import BatchDone
from .timeline import LEGEND, timeline_artists, timeline_extent


class Chart:
    """A figure a notebook shows (``_repr_png_``) and a script saves (``save``)."""

    def __init__(self, figure: Any, title: str = "") -> None:
        self.figure, self.title = figure, title

    def __repr__(self) -> str:
        return f"<Chart {self.title!r}>" if self.title else "<Chart>"

    def png(self, dpi: int = 80) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=dpi)
        return buffer.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png()

    def save(self, path: str | Path, dpi: int = 100) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.figure.savefig(path, dpi=dpi)
        return path


def _figure(width: float, height: float, columns: int = 1) -> tuple[Any, list]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, columns, squeeze=False)[0]
    for ax in axes:
        ax.grid(alpha=0.3)
    return fig, list(axes)


def diverged_at(report: Mapping) -> float | None:
    """Seconds at which a run diverged (its first ``Divergence`` event), or ``None``."""
    times = [e["t"] for e in report.get("events", []) if e.get("type") == "Divergence"]
    return min(times) if times else None


def simulated_label(label: str, report: Mapping) -> str:
    """``label``, and for a simulated run's report (``"simulated": true``) its profile: a simulated
    figure is never shown as a measurement."""
    if not report.get("simulated"):
        return label
    return f"{label} (simulated, profile {report.get('profile', 'unknown')})"


def compare_runs(runs: Mapping[str, Mapping], target: float | None = None, x: str = "t",
                 title: str = "") -> Chart:
    """Test accuracy of several runs against seconds (``x="t"``) or steps (``x="step"``), and, with
    ``target``, each run's time to reach it (the paper's Fig. 4 and 5). Divergence (dashed) and lost
    replicas (dotted) are marked. Real and simulated runs (``dbkit.sim.Cluster``) may share a chart: a
    simulated run is drawn dashed, its label names its profile, and its seconds are simulated seconds.

    Parameters
    ----------
    runs : mapping of label to report
        Reports (``job.report()``), or anything with a ``history`` (and ``events``).
    target : float, optional
        A test accuracy: drawn as a dotted line, and timed per run in a second panel.
    """
    if not runs:
        raise ValueError("compare_runs needs at least one run")
    fig, axes = _figure(11 if target is not None else 6.5, 3.6, 2 if target is not None else 1)
    ax = axes[0]
    simulated = [bool(report.get("simulated")) for report in runs.values()]
    for i, (label, report) in enumerate(runs.items()):
        history = report["history"]
        ax.plot([r[x] for r in history], [r["test_accuracy"] for r in history], marker=".", color=f"C{i}",
                ls="--" if simulated[i] else "-", label=simulated_label(label, report))
        for e in report.get("events", []):
            if e.get("type") == "ReplicaEvent" and e.get("what") == "lost" and x == "t":
                ax.axvline(e["t"], color=f"C{i}", ls=":", lw=1)
                ax.annotate(f"replica {e['replica']} lost", (e["t"], 0.05), color=f"C{i}", rotation=90, fontsize=8,
                            va="bottom", ha="right")
        end = diverged_at(report)
        if end is not None:
            ax.axvline(end if x == "t" else history[-1][x], color=f"C{i}", ls="--", lw=1)
            ax.annotate("diverged", (end if x == "t" else history[-1][x], 0.5), color=f"C{i}", rotation=90,
                        fontsize=8, va="center", ha="right")
    seconds = ("simulated seconds" if all(simulated) else "seconds (simulated seconds for dashed lines)"
               if any(simulated) else "seconds")
    ax.set(xlabel=seconds if x == "t" else "steps", ylabel="test accuracy", ylim=(0, 1))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes
    if target is not None:
        ax.axhline(target, color="gray", ls=":", lw=1)
        labels = list(runs)
        shown = [simulated_label(k, runs[k]) for k in labels]
        times = [time_to_accuracy(runs[k]["history"], target) for k in labels]
        bar = axes[1]
        reached = [float(t.seconds) if t.seconds is not None else 0.0 for t in times]
        bar.barh(range(len(labels)), reached, color=[f"C{i}" for i in range(len(labels))])
        for i, t in enumerate(times):
            unit = "simulated s" if simulated[i] else "s"
            text = f" {t.seconds:.3g} {unit}" if t.reached else (" diverged" if diverged_at(runs[labels[i]]) is not None
                                                           else " not reached")
            bar.text(reached[i], i, text, va="center", fontsize=8)
        bar.set_yticks(range(len(labels)), shown, fontsize=8)
        bar.invert_yaxis()
        bar.set(xlabel=seconds, title=f"time to {target:.0%} test accuracy")
        bar.set_xlim(0, max(reached + [1.0]) * 1.35)
    if title:
        fig.suptitle(title)
    return Chart(fig, title)


def plot_lines(x: Sequence[float], series: Mapping[str, Sequence[float]], xlabel: str, ylabel: str,
               title: str = "", logx: bool = False, logy: bool = False, ax_title: str = "") -> Chart:
    """One line per entry of ``series`` against ``x`` (a measured table as a picture)."""
    fig, (ax,) = _figure(6.5, 3.6)
    for i, (label, ys) in enumerate(series.items()):
        if len(ys) != len(x):
            raise ValueError(f"series {label!r} has {len(ys)} values for {len(x)} x values")
        ax.plot(list(x), list(ys), marker="o", color=f"C{i}", label=label)
    ax.set(xlabel=xlabel, ylabel=ylabel, xscale="log" if logx else "linear", yscale="log" if logy else "linear")
    if ax_title:
        ax.set_title(ax_title)
    ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return Chart(fig, title)


def plot_timelines(batches: Mapping[str, BatchDone], title: str = "") -> Chart:
    """Sandblaster batches side by side: each replica's work units, backups and winners (Sec. 4.2),
    on one time axis so their lengths compare."""
    if not batches:
        raise ValueError("plot_timelines needs at least one batch")
    fig, axes = _figure(4.2 * len(batches), 3.0, len(batches))
    longest = max(timeline_extent(b)[0] for b in batches.values())
    for ax, (label, batch) in zip(axes, batches.items()):
        _, replicas = timeline_extent(batch)
        timeline_artists(ax, batch)
        ax.set(title=label, xlabel="seconds from the batch's start", xlim=(0, longest * 1.05),
               ylim=(-0.6, max(replicas) + 0.9))
        ax.set_yticks(replicas, [f"replica {r}" for r in replicas], fontsize=8)
        ax.title.set_fontsize(9)
    fig.suptitle((title + "\n" if title else "") + LEGEND, fontsize=9)
    return Chart(fig, title)
