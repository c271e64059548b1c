"""The bottom-middle plot of the panel: the staleness of the last window's pushes (Downpour, sync
SGD), with their mean over time in an inset, or the work units of Sandblaster's last batch. Its
artists are redrawn every frame over a background (see ``live_figure``); the staleness axis follows
the window's data, shrinking as well as growing, so that a fall in staleness shows (issue #44)."""

from __future__ import annotations

import math
from typing import Any

from ..telemetry.timeline import LEGEND, timeline_artists, timeline_extent
from .series import RunSeries


def nice_above(x: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at or above ``x`` (an axis' upper limit)."""
    if x <= 0 or not math.isfinite(x):
        return 1.0
    k = math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * 10**k >= x:
            return float(m * 10**k)
    return float(10 ** (k + 1))


def bin_width(span: float, bars: int = 40) -> int:
    """One version per bar up to ``bars`` versions; beyond, 2, 5, 10, ... versions per bar, so that a
    staleness of hundreds of versions (hundreds of replicas) still shows as bars, not hairlines."""
    return 1 if span <= bars else int(nice_above(span / bars))


class Detail:
    """Owns one Axes; ``update(run)`` replaces its artists and says if its limits (the background) changed."""

    def __init__(self, ax: Any, algorithm: str) -> None:
        self.ax, self.algorithm = ax, algorithm
        self._artists: list = []
        self._shown: Any = None
        self._xmax = 0.0
        self._replicas: list[int] = []
        if algorithm == "sandblaster":
            ax.set_title("work units of the last batch, per replica", fontsize=9)
            ax.set_xlabel("seconds into the batch; " + LEGEND, fontsize=7)
            ax.set_ylim(-0.6, 0.6)
        else:
            ax.set_title("staleness of the last window's pushes", fontsize=9)
            ax.set_xlabel("versions between fetch and push", fontsize=8)
            ax.set(ylim=(0, 1), xlim=(-0.6, 0.6))
            ax.set_ylabel("fraction", fontsize=8)
            self.trend_ax = ax.inset_axes([0.56, 0.5, 0.4, 0.3])
            self.trend_ax.set_title("mean, over time", fontsize=7, pad=2)
            self.trend_ax.tick_params(labelsize=6)
            self.trend_ax.set(xlim=(0, 1), ylim=(0, 1))
            self.trend = self.trend_ax.plot([], [], color="C1", lw=1.2, animated=True)[0]
            self._trend_limits = (1.0, 1.0)

    def artists(self) -> list:
        return [*self._artists, self.trend] if self.algorithm != "sandblaster" else self._artists

    def update(self, run: RunSeries) -> bool:
        grown = self._trend(run) if self.algorithm != "sandblaster" else False
        key = run.batch if self.algorithm == "sandblaster" else (run.staleness, run.staleness_examples)
        if key == self._shown:
            return grown
        self._shown = key
        for a in self._artists:
            a.remove()
        self._artists = []
        return (self._timeline(run) if self.algorithm == "sandblaster" else self._staleness(run)) or grown

    def _trend(self, run: RunSeries) -> bool:
        """The mean staleness of each window against time, in the inset; True if its limits grew."""
        pairs = [(t, m) for t, m in zip(run.t, run.mean_staleness) if m is not None and math.isfinite(m)]
        self.trend.set_data([p[0] for p in pairs], [p[1] for p in pairs])
        if not pairs:
            return False
        wanted = (nice_above(max(p[0] for p in pairs) * 1.1), nice_above(max(p[1] for p in pairs) * 1.1 + 0.5))
        if wanted[0] <= self._trend_limits[0] and wanted[1] <= self._trend_limits[1]:
            return False
        self._trend_limits = (max(wanted[0], self._trend_limits[0]), max(wanted[1], self._trend_limits[1]))
        self.trend_ax.set(xlim=(0, self._trend_limits[0]), ylim=(0, self._trend_limits[1]))
        return True

    def _say(self, text: str) -> None:
        self._artists.append(self.ax.text(0.5, 0.5, text, ha="center", va="center", transform=self.ax.transAxes,
                                          fontsize=9, color="gray", animated=True))

    def _staleness(self, run: RunSeries) -> bool:
        h, e = run.staleness, run.staleness_examples
        if not h.count:
            self._say("synchronous: staleness is always 0" if self.algorithm == "sgd" else "no pushes yet")
            return False
        xmax = nice_above(h.max() + 1) - 0.4  # the window's range, not the run's largest so far
        moved = xmax != self._xmax
        if moved:
            self._xmax = xmax
            self.ax.set_xlim(-0.6, self._xmax)
        width = bin_width(self._xmax)
        bins = h.binned(width)
        self._artists += list(self.ax.bar([v + (width - 1) / 2 for v in bins.values],
                                          [c / bins.count for c in bins.counts], color="C0", width=0.8 * width,
                                          animated=True))
        self._artists.append(self.ax.text(0.98, 0.36, f"mean {h.mean():.1f} versions\nmean {e.mean():.0f} examples",
                                          ha="right", va="top", transform=self.ax.transAxes, fontsize=8,
                                          animated=True))
        return moved

    def _timeline(self, run: RunSeries) -> bool:
        batch = run.batch
        if batch is None or not batch.units:
            self._say("no batch yet")
            return False
        length, replicas = timeline_extent(batch)
        grown = length > self._xmax or any(r not in self._replicas for r in replicas)
        if grown:
            self._xmax = max(self._xmax, nice_above(length * 1.1))
            self._replicas = sorted(set(self._replicas) | set(replicas))
            self.ax.set_xlim(0, self._xmax)
            self.ax.set_ylim(min(self._replicas) - 0.6, max(self._replicas) + 0.6)
            self.ax.set_yticks(self._replicas, [f"r{r}" for r in self._replicas])
        self._artists += timeline_artists(self.ax, batch, animated=True)
        return grown
