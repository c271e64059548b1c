"""The lessons: each is built the same way (a question, an exercise with a hidden solution, a closing check),
runs from a fresh kernel as Run All runs it, with its closing check holding and then its exercise's solution
running in the same kernel; its executed copy under docs/lessons matches it; 07_scaling_out runs against a
real scheduler.
"""

import os
import re
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
RENDERED = ROOT / "docs" / "lessons"
NOT_RUN_IN_CI = "07_scaling_out"


def _cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def solution(cells: list) -> str:
    """The code of the exercise's hidden solution: the ```python block inside its <details>."""
    exercise = next(c.source for c in cells if c.cell_type == "markdown" and "## Exercise" in c.source)
    hidden = re.search(r"<details><summary>Solution</summary>(.*?)</details>", exercise, re.S)
    code = re.search(r"```python\n(.*?)```", hidden.group(1) if hidden else "", re.S)
    assert code, "the solution shows its code in a ```python block (a test runs it after the lesson)"
    return code.group(1)


def run_with_solution(path: Path, **env: str) -> str:
    """Execute the lesson from a fresh kernel, then its solution in the same kernel; all text printed."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(solution(nb.cells) + "\nprint('the solution ran')"))
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)


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
    assert solution(cells).strip()


@pytest.mark.parametrize("lesson", [p for p in LESSONS if p.stem != NOT_RUN_IN_CI], ids=lambda p: p.stem)
def test_a_lesson_holds_under_run_all_and_its_solution_runs_after_it(lesson):
    """Run All from a fresh kernel (the closing cell asserts what the lesson claims), then the exercise's
    solution in the same kernel: after Run All the lesson's cluster and panels are still usable."""
    text = run_with_solution(lesson)
    assert "lesson held" in text and text.rstrip().endswith("the solution ran")


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
    panels = [o["data"]["text/plain"] for o in outputs if o.get("data", {}).get("text/plain", "").startswith(
        "dbkit panel")]
    assert not any(" · step 0 · " in p or "\ncreated" in p for p in panels), \
        "a panel whose job runs on keeps its latest frame in the copy, not its first (render_lessons.py)"


def test_scaling_out_runs_against_a_real_scheduler_and_workers(dask_cluster_address, monkeypatch):
    """Against a real scheduler and workers; its section 5 builds the emulated cluster where this machine can
    (CI runs as root) and shows the recorded run elsewhere. The kernel's exit takes the emulated hosts with it."""
    from dbkit.emulate import leftovers, missing, tear_down

    monkeypatch.setenv("DBKIT_SCHEDULER", dask_cluster_address)
    try:
        text = run_with_solution(ROOT / "notebooks" / f"{NOT_RUN_IN_CI}.ipynb")
        # the kernel closes its cluster at exit, or (killed by Jupyter after its grace) its reaper does
        deadline = time.monotonic() + 60
        while (left := leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        tear_down()
    assert text.rstrip().endswith("the solution ran")
    assert f"lesson held: the same job ran on the cluster at {dask_cluster_address}" in text
    assert os.environ["DBKIT_SCHEDULER"] == dask_cluster_address
    if missing() is None:
        assert "measured here on" in text and "RECORDED" not in text
        assert left == [], f"the kernel's exit left the emulated cluster behind: {left}"
    else:
        assert "Showing a RECORDED run" in text
