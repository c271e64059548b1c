"""A PNG of loss and test accuracy against time (the CLI's ``--plot``)."""

from __future__ import annotations

from pathlib import Path


def plot_history(history: list[dict], path: str | Path, title: str = "") -> Path:
    """Save training loss and test accuracy against seconds to ``path`` (PNG)."""
    from matplotlib.figure import Figure  # no pyplot: works headless and in any backend

    fig = Figure(figsize=(9, 3.5), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    t = [r["t"] for r in history]
    ax1.plot(t, [r["train_loss"] for r in history], marker=".", label="training loss")
    if all("test_loss" in r for r in history):
        ax1.plot(t, [r["test_loss"] for r in history], marker=".", label="test loss")
    ax1.set(xlabel="seconds", ylabel="loss", yscale="log")
    ax1.legend()
    ax2.plot(t, [r["test_accuracy"] for r in history], marker=".", color="C2")
    ax2.set(xlabel="seconds", ylabel="test accuracy", ylim=(0, 1))
    ax2.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
