"""The lessons: each is built the same way (a question, an exercise with a hidden solution, a closing check),
its executed copy under docs/lessons matches it, and 07_scaling_out runs against a real scheduler.

The other lessons are executed by nbmake (``pytest --nbmake``, in pyproject's addopts), where their closing
cells assert what the lesson claims.
"""

import os
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
RENDERED = ROOT / "docs" / "lessons"
NOT_RUN_IN_CI = "07_scaling_out"


def _cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def test_the_ten_lessons_are_there():
    assert [p.stem for p in LESSONS] == ["00_tour", "01_parameter_server", "02_downpour",
                                         "03_adagrad_and_warm_start", "04_sandblaster", "05_partitioning",
                                         "06_failures", "07_scaling_out", "08_at_scale", "09_after_distbelief"]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.stem)
def test_a_lesson_asks_a_question_has_an_exercise_and_checks_itself(lesson):
    cells = _cells(lesson)
    assert cells[0].cell_type == "markdown" and "question" in cells[0].source.lower(), "open with the question"
    exercise = [c for c in cells if c.cell_type == "markdown" and "## Exercise" in c.source]
    assert exercise and "<details><summary>Solution</summary>" in exercise[0].source, "one exercise, solution hidden"
    last = cells[-1]
    assert last.cell_type == "code" and "assert " in last.source and "lesson held" in last.source


@pytest.mark.parametrize("lesson", [p for p in LESSONS if p.stem != NOT_RUN_IN_CI], ids=lambda p: p.stem)
def test_the_executed_copy_is_the_lesson_with_its_pictures(lesson):
    copy = RENDERED / lesson.name
    assert copy.exists(), f"run: DBKIT_SMALL=1 python docs/render_lessons.py {lesson.stem}"
    ours, theirs = _cells(lesson), _cells(copy)
    assert [c.source for c in ours] == [c.source for c in theirs], \
        f"docs/lessons/{lesson.name} is stale: run DBKIT_SMALL=1 python docs/render_lessons.py {lesson.stem}"
    outputs = [o for c in theirs if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the copy shows the lesson's plots"
    assert not any(o.output_type == "error" for o in outputs)
    assert not any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs), \
        "copies keep the panel's picture, not a widget view that needs a kernel"
    assert any("lesson held" in o.get("text", "") for o in outputs)


def test_scaling_out_runs_against_a_real_scheduler_and_workers(dask_cluster_address, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("DBKIT_SCHEDULER", dask_cluster_address)
    nb = nbformat.read(ROOT / "notebooks" / f"{NOT_RUN_IN_CI}.ipynb", as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert f"lesson held: the same job ran on the cluster at {dask_cluster_address}" in text
    assert os.environ["DBKIT_SCHEDULER"] == dask_cluster_address
