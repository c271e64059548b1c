"""Checks that keep the code base as it is meant to be: ruff and mypy clean, notebooks as thin
jupytext pairs in sync with their .ipynb, using dbkit's public names only."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
PUBLIC_PACKAGES = {"dbkit", "dbkit.nn", "dbkit.data", "dbkit.ps", "dbkit.partition", "dbkit.downpour",
                   "dbkit.sandblaster", "dbkit.sync_sgd", "dbkit.training", "dbkit.telemetry", "dbkit.jobs",
                   "dbkit.runtime", "dbkit.runtime.dask", "dbkit.config", "dbkit.sim", "dbkit.sim.figures",
                   "dbkit.calibration", "dbkit.emulate"}


def _run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_ruff_finds_nothing():
    out = _run("ruff", "check", "dbkit", "tests", "benchmarks", "notebooks")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_passes_on_all_of_dbkit():
    out = _run("mypy")  # files and settings in pyproject.toml: the whole package
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_notebook_is_a_jupytext_pair():
    assert NOTEBOOKS
    for nb in NOTEBOOKS:
        assert nb.with_suffix(".py").exists(), f"{nb.name} has no jupytext .py pair"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_the_pair_is_in_sync(notebook):
    import jupytext
    import nbformat

    def cells(nb):
        return [(c.cell_type, c.source.strip()) for c in nb.cells]

    script = jupytext.read(notebook.with_suffix(".py"))
    saved = nbformat.read(notebook, as_version=4)
    assert cells(script) == cells(saved), f"run: jupytext --sync {notebook.with_suffix('.py').name}"
    assert all(not c.get("outputs") for c in saved.cells if c.cell_type == "code"), "commit notebooks without outputs"


@pytest.mark.parametrize("script", [nb.with_suffix(".py") for nb in NOTEBOOKS], ids=lambda p: p.name)
def test_notebooks_use_public_names_only(script):
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        assert not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)), \
            f"{script.name} defines {node.name}: library code belongs in dbkit"
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dbkit"):
            assert node.module in PUBLIC_PACKAGES, f"{script.name} imports from {node.module}"
            exported = set(getattr(importlib.import_module(node.module), "__all__", ()))
            for alias in node.names:
                public = alias.name in exported or f"{node.module}.{alias.name}" in PUBLIC_PACKAGES
                assert public, f"{script.name}: {alias.name} is not public in {node.module}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("dbkit.") or alias.name in PUBLIC_PACKAGES, alias.name
        if isinstance(node, ast.Attribute):
            assert not node.attr.startswith("_"), f"{script.name} reaches into {node.attr}"
    assert not re.search(r"\bjob\.(book|server|cluster)\b", script.read_text())


def test_every_lock_says_its_order_where_it_is_declared():
    """Issue #22: a lock's place in the order (or that it is a leaf, taking no other lock) is written on the
    comment just above its declaration, so that a reader adding a lock knows where it goes."""
    unsaid = []
    for path in sorted((ROOT / "dbkit").rglob("*.py")):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not re.search(r"threading\.(Lock|RLock|Condition)\(\)", line):
                continue
            above, j = [], i - 1
            while j >= 0 and lines[j].strip().startswith("#"):
                above.append(lines[j])
                j -= 1
            if not any("lock order:" in c for c in above):
                unsaid.append(f"{path.relative_to(ROOT)}:{i + 1}")
    assert not unsaid, "say each lock's order on the comment above it ('# lock order: ...'): " + ", ".join(unsaid)


def private_writes(source: str) -> list[str]:
    """Assignments in ``source`` to a private attribute (``_name``) of anything but ``self`` or ``cls``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and part.attr.startswith("_") and not part.attr.startswith("__")
                        and not (isinstance(part.value, ast.Name) and part.value.id in ("self", "cls"))):
                    found.append(f"line {node.lineno}: {ast.unparse(target)}")
    return found


def test_no_object_writes_another_objects_private_state():
    """Issue #22: an object asks another to change its state; it never writes the other's private attributes
    (``fleet._cap = ...``, ``self.book._entries[i] = ...``). The check itself finds such a write."""
    assert private_writes("other._cap = 3\nself.book._entries[1] += 2\nself._mine = 1\n") == [
        "line 1: other._cap", "line 2: self.book._entries[1]"]
    writes = {str(p.relative_to(ROOT)): w for p in sorted((ROOT / "dbkit").rglob("*.py"))
              if (w := private_writes(p.read_text()))}
    assert not writes, f"ask the object instead: {writes}"
