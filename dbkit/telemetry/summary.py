"""A run's report in the few numbers a comparison needs, and a table of several runs.

``summarize(report)`` reads a JSON report (``job.report()`` or a file the CLI
wrote) into a ``RunSummary``; ``SummaryTable`` lays several side by side, as
HTML in a notebook and as text anywhere else.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass

from .accuracy import time_to_accuracy
from .compare import diverged_at


@dataclass(frozen=True)
class RunSummary:
    """What a run did, read off its report.

    ``staleness`` and ``staleness_examples`` are the means over every push
    the shards applied (in versions, and in examples applied since the
    pusher's fetch); ``seconds_to_target`` is ``None`` when the target was
    not reached (or none was asked).
    """

    state: str
    steps: int
    examples_per_second: float
    test_accuracy: float
    full_batch_loss: float
    staleness: float
    staleness_examples: float
    megabytes: float
    diverged_at: float | None
    target: float | None
    seconds_to_target: float | None


def summarize(report: Mapping, target: float | None = None) -> RunSummary:
    """The ``RunSummary`` of ``report``; ``target`` defaults to the run's own ``target_accuracy``."""
    target = target if target is not None else report["config"].get("target_accuracy")
    shards = report.get("shards", [])
    updates = sum(s["updates"] for s in shards)

    def mean(key: str) -> float:
        return sum(s[key]["mean"] * s["updates"] for s in shards) / updates if updates else 0.0

    reached = time_to_accuracy(report["history"], target).seconds if target is not None else None
    b = report["bytes"]
    return RunSummary(
        state=report["state"], steps=int(report["steps"]), examples_per_second=float(report["examples_per_second"]),
        test_accuracy=float(report["final"]["test_accuracy"]),
        full_batch_loss=float(report["final"]["full_batch_loss"] or float("nan")),
        staleness=mean("staleness"), staleness_examples=mean("staleness_examples"),
        megabytes=(b["fetched"] + b["pushed"] + b["between_partitions"]) / 1e6, diverged_at=diverged_at(report),
        target=target, seconds_to_target=reached)


class SummaryTable:
    """Several runs' summaries, one row each (HTML in a notebook, text in ``str``)."""

    COLUMNS = ("state", "steps", "examples/s", "test accuracy", "staleness (versions)", "staleness (examples)",
               "MB moved", "time to target")

    def __init__(self, runs: Mapping[str, Mapping], target: float | None = None) -> None:
        self.rows = {label: summarize(report, target) for label, report in runs.items()}

    def __getitem__(self, label: str) -> RunSummary:
        return self.rows[label]

    def cells(self, s: RunSummary) -> list[str]:
        if s.seconds_to_target is not None:
            reach = f"{s.seconds_to_target:.1f} s to {s.target:.0%}"
        else:
            reach = "diverged" if s.diverged_at is not None else ("not reached" if s.target is not None else "")
        return [s.state, f"{s.steps:,}", f"{s.examples_per_second:,.0f}", f"{s.test_accuracy:.3f}",
                f"{s.staleness:.2f}", f"{s.staleness_examples:,.0f}", f"{s.megabytes:,.1f}", reach]

    def __str__(self) -> str:
        rows = [["run", *self.COLUMNS]] + [[label, *self.cells(s)] for label, s in self.rows.items()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
                         for r in rows)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in ("run", *self.COLUMNS))
        body = "".join("<tr><td>" + html.escape(label) + "</td>"
                       + "".join(f"<td>{html.escape(c)}</td>" for c in self.cells(s)) + "</tr>"
                       for label, s in self.rows.items())
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
