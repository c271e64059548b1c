"""The panel's plots: one matplotlib figure, laid out once and redrawn into PNG bytes cheaply.

Never pyplot (it keeps figures alive and needs a GUI backend): a
``matplotlib.figure.Figure`` on an Agg canvas with a fixed layout. Drawing
axes, ticks and labels is what costs (~100 ms a frame here, against ~1 ms for
the lines), and the kernel's CPU is taken from the replicas, so the figure
*blits*: axes limits only grow, by steps to a round number, and only then (or
when a change marker or a finished run is added) is the whole figure drawn
and kept as a background; every other frame restores that background and
draws the current run's lines on it (``animated`` artists). Finished runs stay
on the axes, faded, so two settings can be compared on one plot.
"""

from __future__ import annotations

import io
import math
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator
from PIL import Image

from .detail import Detail, nice_above
from .series import RunSeries

FADED = dict(alpha=0.3, linewidth=1.0)
LOSS_RANGE = (1e-4, 1e4)  # a diverging run's losses run off the top of the plot instead of stretching it
LOG_AXES = {"loss": LOSS_RANGE, "rate": (1e-2, 1e12)}  # axes in decades: (the range they may span)


def _positive(xs: list, ys: list) -> tuple[list, list]:
    pairs = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y) and y > 0]
    return [p[0] for p in pairs], [p[1] for p in pairs]


class LiveFigure:
    """Loss and accuracy against seconds and steps, examples per second, staleness (or Sandblaster's
    batch timeline) and bytes per second; ``draw(run, past)`` returns a PNG. ``clock`` names the
    seconds: ``"simulated seconds"`` for a job on a simulated cluster."""

    def __init__(self, algorithm: str, width: float = 10.0, height: float = 5.6, dpi: int = 72,
                 clock: str = "seconds") -> None:
        self.algorithm, self.clock = algorithm, clock
        self.figure = Figure(figsize=(width, height), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.full_draws = 0  # whole-figure draws (the expensive ones), for tests and benchmarks
        self._run: RunSeries | None = None
        self._past: tuple[int, ...] = ()
        self._setup([])

    def _setup(self, past: list[RunSeries]) -> None:
        fig = self.figure
        fig.clear()
        fig.subplots_adjust(left=0.06, right=0.99, top=0.92, bottom=0.09, wspace=0.28, hspace=0.45)
        axes = fig.subplots(2, 3)
        (self.ax_loss, self.ax_acc, self.ax_steps), (self.ax_rate, ax_detail, self.ax_bytes) = axes
        per = self.clock.replace("seconds", "second")
        self.ax_loss.set(title=f"loss against {self.clock}", yscale="log")
        self.ax_acc.set(title="test accuracy", ylim=(0, 1))
        self.ax_steps.set(title="loss against updates (steps)", yscale="log")
        self.ax_rate.set(title=f"examples per {per} (last few samples)", yscale="log")
        self.ax_bytes.set(title=f"MB per {per}")
        for ax in axes.flat:
            ax.tick_params(labelsize=8)
            ax.title.set_fontsize(9)
            ax.grid(alpha=0.25)
        for ax in (self.ax_loss, self.ax_steps, self.ax_rate):
            ax.yaxis.set_minor_locator(NullLocator())
        self.ax_loss.set_xlabel(self.clock, fontsize=8)
        self.ax_steps.set_xlabel("steps", fontsize=8)

        def line(ax: Any, color: str, **kw: Any) -> Any:
            return ax.plot([], [], color=color, animated=True, **kw)[0]

        self.lines = {
            "batch_loss": line(self.ax_loss, "C0", lw=1, label="batch loss"),
            "test_loss": line(self.ax_loss, "C1", marker=".", lw=1.5, label="test loss"),
            "accuracy": line(self.ax_acc, "C2", marker=".", lw=1.5),
            "steps_batch": line(self.ax_steps, "C0", lw=1),
            "steps_test": line(self.ax_steps, "C1", marker=".", lw=1.5),
            "rate": line(self.ax_rate, "black", lw=1.5, label="total"),
            "per_replica": line(self.ax_rate, "dimgray", lw=1.2, ls="--", label="per replica (mean)"),
            "fetched": line(self.ax_bytes, "C0", lw=1.2, label="fetched"),
            "pushed": line(self.ax_bytes, "C3", lw=1.2, label="pushed"),
            "between": line(self.ax_bytes, "C4", lw=1.2, label="between partitions"),
        }
        self.replica_lines: dict[int, Any] = {}
        self.detail = Detail(ax_detail, self.algorithm)
        for i, run in enumerate(past):
            color = f"C{(i + 5) % 10}"
            t, loss = _positive(run.eval_t, run.test_loss)
            self.ax_loss.plot(t, loss, color=color, label=f"earlier: {run.label[:60]}", **FADED)
            self.ax_acc.plot(run.eval_t, run.test_accuracy, color=color, **FADED)
            self.ax_steps.plot(*_positive(run.eval_step, run.test_loss), color=color, **FADED)
            self.ax_rate.plot(*_positive(run.t, run.rate), color=color, **FADED)
        self.ax_loss.legend(fontsize=7, loc="upper right")
        self.ax_rate.legend(fontsize=7, loc="lower left")
        self.ax_bytes.legend(fontsize=7, loc="upper left")
        self._limits: dict[str, tuple[float, float]] = {}
        self._markers = 0
        self._background: Any = None
        self._title = ""

    def draw(self, run: RunSeries, past: list[RunSeries]) -> bytes:
        """The PNG of ``run`` over the faded ``past`` runs."""
        if run is not self._run or tuple(map(id, past)) != self._past:
            self._setup(past)
            if run.target is not None:
                self.ax_acc.axhline(run.target, color="C2", lw=0.8, ls=":")
            self._run, self._past = run, tuple(map(id, past))
        self._set_data(run)
        full = self._background is None
        full |= self._grow_limits(run, past if full else [])  # limits only grow: the past counts once
        full |= self._add_markers(run)
        full |= self.detail.update(run)
        full |= run.label != self._title  # the settings changed (the title is drawn in the background)
        if full:
            self._title = run.label
            self.figure.suptitle(run.label, fontsize=10)
            self.canvas.draw()  # everything but the animated artists
            self._background = self.canvas.copy_from_bbox(self.figure.bbox)
            self.full_draws += 1
        else:
            self.canvas.restore_region(self._background)
        for artist in [*self.lines.values(), *self.replica_lines.values(), *self.detail.artists()]:
            artist.axes.draw_artist(artist)
        return self._png()

    def _png(self) -> bytes:
        width, height = self.canvas.get_width_height()
        image = Image.frombuffer("RGBA", (width, height), self.canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="png", compress_level=1)
        return buffer.getvalue()

    def _set_data(self, run: RunSeries) -> None:
        lines = self.lines
        lines["batch_loss"].set_data(*_positive(run.t, run.batch_loss))
        lines["test_loss"].set_data(*_positive(run.eval_t, run.test_loss))
        lines["accuracy"].set_data(run.eval_t, run.test_accuracy)
        lines["steps_batch"].set_data(*_positive(run.step, run.batch_loss))
        lines["steps_test"].set_data(*_positive(run.eval_step, run.test_loss))
        lines["rate"].set_data(*_positive(run.t, run.rate))
        lines["per_replica"].set_data(*_positive(run.t, run.per_replica))
        for replica, (ts, rates) in run.replica_rates.items():
            if replica not in self.replica_lines:
                self.replica_lines[replica] = self.ax_rate.plot([], [], lw=0.8, alpha=0.8, animated=True,
                                                                color=f"C{replica % 10}")[0]
            self.replica_lines[replica].set_data(*_positive(ts, rates))
        lines["fetched"].set_data(run.t, [b / 1e6 for b in run.fetched])
        lines["pushed"].set_data(run.t, [b / 1e6 for b in run.pushed])
        lines["between"].set_data(run.t, [b / 1e6 for b in run.between])

    def _grow_limits(self, run: RunSeries, past: list[RunSeries]) -> bool:
        """Widen any axis the data of ``run`` (and ``past``) has outgrown, to a round number; True if one changed."""
        runs = [run, *past]
        t_max = max((max(r.t, default=0.0) for r in runs), default=0.0)
        step_max = max((max(r.step, default=0) for r in runs), default=0)
        losses = [y for r in runs for y in _positive(r.t, r.batch_loss)[1] + _positive(r.eval_t, r.test_loss)[1]]
        rates = [y for r in runs for y in _positive(r.t, r.rate)[1] + _positive(r.t, r.per_replica)[1]]
        rates += [y for _, rs in run.replica_rates.values() for y in _positive(rs, rs)[1]]
        bytes_max = max([0.0, *run.fetched, *run.pushed, *run.between]) / 1e6
        wanted = {"t": (0.0, t_max), "step": (0.0, float(step_max)), "bytes": (0.0, bytes_max)}
        if losses:
            wanted["loss"] = (min(losses), max(losses))
        if rates:
            wanted["rate"] = (min(rates), max(rates))
        changed = False
        for key, (lo, hi) in wanted.items():
            have = self._limits.get(key)
            if key in LOG_AXES:
                if have is not None and have[0] <= lo and hi <= have[1]:
                    continue
                lo_, hi_ = (min(lo, have[0]), max(hi, have[1])) if have else (lo, hi)
                lo_, hi_ = max(lo_, LOG_AXES[key][0]), min(max(hi_, lo_), LOG_AXES[key][1])
                new = (10.0 ** math.floor(math.log10(lo_)), 10.0 ** math.ceil(math.log10(hi_) + 1e-9))
            else:
                if have is not None and hi <= have[1]:
                    continue
                new = (0.0, nice_above(max(hi * 1.1, 1e-9 if key != "t" else 1.0)))
            self._limits[key] = new
            changed = True
        if changed:
            t, step = self._limits["t"], self._limits["step"]
            for ax in (self.ax_loss, self.ax_acc, self.ax_rate, self.ax_bytes):
                ax.set_xlim(*t)
            self.ax_steps.set_xlim(*step)
            if "rate" in self._limits:
                self.ax_rate.set_ylim(*self._limits["rate"])
            self.ax_bytes.set_ylim(*self._limits["bytes"])
            if "loss" in self._limits:
                self.ax_loss.set_ylim(*self._limits["loss"])
                self.ax_steps.set_ylim(*self._limits["loss"])
        return changed

    def _add_markers(self, run: RunSeries) -> bool:
        """A dashed line and a label at every change (drawn into the background); True if any is new."""
        new = run.markers[self._markers:]
        for m in new:
            for ax in (self.ax_loss, self.ax_acc, self.ax_rate, self.ax_bytes):
                ax.axvline(m.t, color="gray", lw=0.8, ls="--")
            self.ax_steps.axvline(m.step, color="gray", lw=0.8, ls="--")
            self.ax_acc.text(m.t, 0.02, " " + m.label, rotation=90, fontsize=7, color="dimgray", va="bottom",
                             clip_on=True)
        self._markers = len(run.markers)
        return bool(new)
