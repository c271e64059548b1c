"""Execute the lesson notebooks and keep executed copies, with their plots, under ``docs/lessons/``.

    DBKIT_SMALL=1 python docs/render_lessons.py             # every lesson but 07_scaling_out
    DBKIT_SMALL=1 python docs/render_lessons.py 02_downpour # one

A reader finds the pictures there without running anything (GitHub renders
``.ipynb``). The copies keep each output's static form: the control panel's
live widget view is dropped, its last frame (``image/png``) stays, so the
page shows the panel as it was when the lesson ended. Prints how long each
lesson took from a fresh kernel.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
SOURCE, TARGET = ROOT / "notebooks", ROOT / "docs" / "lessons"
NOT_RUN = {"07_scaling_out"}  # needs a real cluster: shown, not executed
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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


def render(name: str) -> float:
    """Execute ``notebooks/NAME.ipynb`` from a fresh kernel into ``docs/lessons/NAME.ipynb``; its seconds."""
    nb = nbformat.read(SOURCE / f"{name}.ipynb", as_version=4)
    t = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(SOURCE)}}).execute()
    seconds = time.perf_counter() - t
    TARGET.mkdir(parents=True, exist_ok=True)
    nbformat.write(static(nb), TARGET / f"{name}.ipynb")
    return seconds


def main(argv: list[str]) -> int:
    os.environ.setdefault("DBKIT_SMALL", "1")
    os.environ.setdefault("MPLBACKEND", "Agg")
    names = argv or sorted(p.stem for p in SOURCE.glob("*.ipynb") if p.stem not in NOT_RUN)
    for name in names:
        print(f"{name}: {render(name):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
