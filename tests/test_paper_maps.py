"""The paper folders' READMEs map the paper's pseudocode to ``file:function``; every such reference must
name a file that exists and a function, class or method defined in it, so that the maps cannot rot
when code moves."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dbkit"
FOLDERS = ["downpour", "sandblaster", "partition"]
REFERENCE = re.compile(r"`((?:\.\./)?[\w/]+\.py):([A-Za-z_][\w.]*)")


def defined_names(path: Path) -> set[str]:
    """Every ``function``, ``Class`` and ``Class.method`` defined at the top of ``path``."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{m.name}" for m in node.body
                      if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return names


def references(folder: str) -> list[tuple[Path, str]]:
    text = (PACKAGE / folder / "README.md").read_text()
    return [((PACKAGE / folder / file).resolve(), name) for file, name in REFERENCE.findall(text)]


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_file_function_in_the_map_exists(folder):
    refs = references(folder)
    assert len(refs) >= 8, f"{folder}/README.md maps too little: {refs}"
    missing = [f"{p.relative_to(PACKAGE)}:{name}" for p, name in refs
               if not p.exists() or name not in defined_names(p)]
    assert not missing, f"{folder}/README.md names what is not there: {missing}"


def test_the_check_sees_a_name_that_is_not_there(tmp_path):
    # The test above means something only if a wrong name is caught.
    assert "DownpourReplica.step" in defined_names(PACKAGE / "downpour" / "replica.py")
    assert "DownpourReplica.no_such_step" not in defined_names(PACKAGE / "downpour" / "replica.py")
