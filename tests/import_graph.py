"""The package's import graph, read from its source (as the layering tests need it): which module imports which.

An import under ``if TYPE_CHECKING:`` loads nothing and is not an arrow; an import inside a function is
(it loads when the function runs). Each module belongs to the folder it sits in; the folders are ranked in
``LAYERS``, from the bottom of the house up.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dbkit"

#: the folders from the bottom up (DESIGN.md's layering); a module of the package's own folder is ranked by name
LAYERS: tuple[tuple[str, ...], ...] = (
    ("settings", "named_classes", "nn", "data"),
    ("ps",),
    ("training", "telemetry", "config", "extensions"),
    ("runtime", "runtime/dask", "runtime/inprocess", "runtime/sim", "emulate"),
    ("jobs",),
    ("partition",),
    ("downpour", "sandblaster", "sync_sgd"),
    ("after",),
    ("sim", "sim/figures", "calibration"),
    ("runner", "registered", "cli", "widgets", "__init__", "__main__"),
)
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
#: the algorithms: what ``dbkit/runtime`` never imports
ALGORITHMS = ("downpour", "sandblaster", "partition", "after", "sync_sgd", "jobs", "sim")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def directory(module: str, modules: dict[str, Path]) -> str:
    """The folder ``module`` sits in: ``runtime/sim`` for ``dbkit.runtime.sim.engine``, ``.`` for ``dbkit.config``."""
    return modules[module].parent.relative_to(PACKAGE).as_posix()


def folder(module: str, modules: dict[str, Path]) -> str:
    """Where ``module`` ranks: its folder, or its own name for a file of the package's own folder."""
    where = directory(module, modules)
    return where if where != "." else modules[module].stem


def _guarded(tree: ast.AST) -> set[int]:
    """The ids of import nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imports() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Every module of the package, and the modules each one imports."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = _guarded(tree)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                found = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            edges[name] |= {m for m in found if m in modules and m != name}
    return modules, edges


def circles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def upward_arrows() -> set[str]:
    """``"a -> b"`` for each import that runs up the layers (``b``'s folder ranks above ``a``'s)."""
    modules, edges = imports()
    out = set()
    for a, targets in edges.items():
        for b in targets:
            if RANK[folder(b, modules)] > RANK[folder(a, modules)]:
                out.add(f"{a} -> {b}")
    return out
