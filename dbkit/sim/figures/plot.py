"""The simulated figures as PNGs, each titled "simulated" with its profile, the paper's numbers beside."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_figure(report: dict, path: str | Path) -> Path:
    """Draw a ``figure3``/``figure4``/``figure5`` report to ``path`` (PNG); returns the path."""
    from matplotlib.figure import Figure  # no pyplot: works headless and in any backend

    fig = Figure(figsize=(9.5, 5), layout="constrained")
    ax = fig.subplots()
    kind = report["figure"]
    {"fig3": _fig3, "fig4": _fig4, "fig5": _fig5}[kind](ax, report)
    fig.suptitle(f"simulated ({report['profile']} profile): {TITLES[kind]}", fontsize=11)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


TITLES = {"fig3": "speed-up against machines per model (DistBelief Fig. 3)",
          "fig4": "test accuracy against time (DistBelief Fig. 4)",
          "fig5": "time to a fixed accuracy against machines (DistBelief Fig. 5)"}


def _fig3(ax: Any, report: dict) -> None:
    for i, (name, m) in enumerate(report["models"].items()):
        ax.plot(m["machines"], m["speedup"], marker="o", color=f"C{i}",
                label=f"{name} ({m['parameters'] / 1e6:,.0f}M, {m['connectivity']})")
    colors = {name: f"C{i}" for i, name in enumerate(report["models"])}
    for p in report["paper"]["points"]:
        color = colors.get(p["model"], "k")
        marker = "^" if p["relation"] == ">" else "s"
        ax.scatter([p["machines"]], [p["speedup"]], marker=marker, s=90, facecolors="none",
                   edgecolors=color, linewidths=2, zorder=5, label=f"{p['label']} ({p['model']})")
        if p["relation"] == ">":  # a lower bound: an arrow up from it, in its model's colour, to its model's curve
            m = report["models"].get(p["model"])
            at = m["speedup"][m["machines"].index(p["machines"])] if m and p["machines"] in m["machines"] else 0.0
            ax.annotate("", xy=(p["machines"], max(at, p["speedup"] * 1.5)), xytext=(p["machines"], p["speedup"]),
                        arrowprops=dict(arrowstyle="->", color=color, lw=1.5, alpha=0.7), zorder=4)
    ax.set(xscale="log", xlabel="machines per model instance", ylabel="training speed-up (one step)",
           title=f"cost-only, mini-batch of {report['batch']}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes


def _fig4(ax: Any, report: dict) -> None:
    for i, (name, m) in enumerate(report["methods"].items()):
        replicas = f"{m['replicas']} replica" + ("s" if m["replicas"] != 1 else "")
        ax.plot(m["t"], m["test_accuracy"], marker=".", markersize=3, color=f"C{i}", label=f"{name} ({replicas})")
        if m["time_to_target"] is not None:
            ax.axvline(m["time_to_target"], color=f"C{i}", alpha=0.3, linestyle=":")
    ax.axhline(report["target"], color="k", alpha=0.4, linestyle="--", label=f"target {report['target']:g}")
    order = " < ".join(report["paper"]["order_slowest_to_fastest"])
    ax.set(xlabel="simulated seconds", ylabel="test accuracy",
           title=f"{report['dataset']}, {report['model']}\npaper, slowest to fastest: {order}")
    ax.title.set_fontsize(8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes


def _fig5(ax: Any, report: dict) -> None:
    budget = report.get("setup", {}).get("seconds")
    for i, (name, m) in enumerate(report["methods"].items()):
        pts = [(k, t) for k, t in zip(m["machines"], m["time_to_target"]) if t is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=name)
        missed = [k for k, t in zip(m["machines"], m["time_to_target"]) if t is None]
        if missed and budget:
            ax.scatter(missed, [budget] * len(missed), marker="x", color=f"C{i}", s=60,
                       label=f"{name}: not reached (budget {budget:g} s)")
        far = report.get("estimated", {}).get(name)
        if far:  # from the run with numerics it rests on, dashed, to hollow markers: estimated from cost-only runs
            others = far["machines"][0] - far["replicas"][0]
            k, t = far["basis"]["replicas"] + others, far["basis"]["time_to_target"]
            bound = "a lower bound" if "lower bound" in far["how"] else "the same batches"
            ax.plot([k, *far["machines"]], [t, *far["time_to_target"]], linestyle="--", color=f"C{i}", alpha=0.7)
            ax.scatter(far["machines"], far["time_to_target"], marker="o", s=50, facecolors="none",
                       edgecolors=f"C{i}", linewidths=1.5, zorder=5, label=f"{name}: estimated, cost-only ({bound})")
    ax.set(xscale="log", yscale="log", xlabel="machines", ylabel=f"simulated seconds to accuracy {report['target']:g}",
           title="paper: " + ";\n".join(report["paper"]["findings"]))
    ax.title.set_fontsize(8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)  # beside the axes
