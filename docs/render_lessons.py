"""Execute the lesson notebooks and keep executed copies, with their plots, under ``docs/lessons/``.

    DBKIT_SMALL=1 python docs/render_lessons.py             # every lesson but 07_scaling_out
    DBKIT_SMALL=1 python docs/render_lessons.py 02_downpour # one

A reader finds the pictures there without running anything (GitHub renders
``.ipynb``). The copies keep each output's static form: the control panel's
live widget view is dropped, its last frame (``image/png``) stays, so the
page shows the panel as it was when the lesson ended. Prints, for each lesson
run from a fresh kernel, its seconds and its longest silence: the longest time
any cell went without showing something new (an output, or a widget update
such as a progress bar's), and which cell (issue #44: none over 10 s).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOURCE, TARGET = ROOT / "notebooks", ROOT / "docs" / "lessons"
NOT_RUN = {"07_scaling_out"}  # needs a real cluster: shown, not executed
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# run after the lesson: panels whose jobs run on keep their latest frame as their picture
KEEP_FRAMES = "import dbkit.widgets\ndbkit.widgets.keep_last_frames();"


def static(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` without live widget views and widget state (their PNG and text forms stay)."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None and WIDGET_VIEW in data:
                data.pop(WIDGET_VIEW)
                if not set(data) - {"text/plain"}:
                    continue  # a widget with no static form: nothing to show
            kept.append(out)
        cell.outputs = kept
    return nb


@dataclass
class Silences:
    """When each cell started, showed something and ended (``time.monotonic``)."""

    marks: dict[int, list[float]] = field(default_factory=dict)

    def mark(self, cell_index: int) -> None:
        self.marks.setdefault(cell_index, []).append(time.monotonic())

    def longest(self) -> tuple[float, int]:
        """The longest gap between two marks of one cell, and that cell's index."""
        gaps = [(b - a, i) for i, ts in self.marks.items() for a, b in zip(ts, ts[1:])]
        return max(gaps, default=(0.0, -1))


class TimedClient(NotebookClient):
    """A ``NotebookClient`` that marks every output of each cell, and every update of a widget the cell
    itself made (a progress bar's): an earlier cell's panel refreshing meanwhile does not count."""

    def __init__(self, nb: nbformat.NotebookNode, silences: Silences, **kw) -> None:
        super().__init__(nb, on_cell_execute=lambda cell, cell_index: silences.mark(cell_index),
                         on_cell_executed=lambda cell, cell_index, execute_reply: silences.mark(cell_index), **kw)
        self.silences = silences
        self.opened_in: dict[str, int] = {}  # a widget's comm id -> the cell that made it

    def output(self, outs, msg, display_id, cell_index):  # noqa: ANN001 - nbclient's signature
        self.silences.mark(cell_index)
        return super().output(outs, msg, display_id, cell_index)

    def handle_comm_msg(self, outs, msg, cell_index):  # noqa: ANN001 - nbclient's signature
        comm = msg["content"].get("comm_id", "")
        if msg["msg_type"] == "comm_open":
            self.opened_in[comm] = cell_index
        elif self.opened_in.get(comm) == cell_index:
            self.silences.mark(cell_index)
        return super().handle_comm_msg(outs, msg, cell_index)


def render(name: str) -> tuple[float, float, int]:
    """Execute ``notebooks/NAME.ipynb`` from a fresh kernel into ``docs/lessons/NAME.ipynb``; its seconds,
    its longest silence in seconds and the (0-based) index of the cell where it was."""
    nb = nbformat.read(SOURCE / f"{name}.ipynb", as_version=4)
    silences = Silences()
    nb.cells.append(nbformat.v4.new_code_cell(KEEP_FRAMES))
    t = time.perf_counter()
    TimedClient(nb, silences, timeout=600, kernel_name="python3",
                resources={"metadata": {"path": str(SOURCE)}}).execute()
    seconds = time.perf_counter() - t
    nb.cells.pop()  # (its only effect: the panels' pictures in the cells above)
    TARGET.mkdir(parents=True, exist_ok=True)
    nbformat.write(static(nb), TARGET / f"{name}.ipynb")
    return (seconds, *silences.longest())


def main(argv: list[str]) -> int:
    os.environ.setdefault("DBKIT_SMALL", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    names = argv or sorted(p.stem for p in SOURCE.glob("*.ipynb") if p.stem not in NOT_RUN)
    for name in names:
        seconds, silence, cell = render(name)
        print(f"{name}: {seconds:.1f} s, longest silence {silence:.1f} s (cell {cell})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
