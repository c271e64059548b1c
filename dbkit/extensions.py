"""Loading a researcher's own update rules and replica loops: a module by name or a Python file by path.

A module registers what it defines as it is imported (``@register_rule``,
``@register_replica``), so loading it is all it takes: ``load_extension``
here, ``dbkit run downpour --extension my_rule.py --optimizer my-rule`` on the
command line. A LocalCluster that dbkit starts afterwards inherits this
process's module path, so its workers import the same file; on a cluster of
your own, install the module on every worker (or ``client.upload_file``).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_extension(source: str) -> ModuleType:
    """Import ``source`` (a module name, or the path of a ``.py`` file) and return it.

    A file is imported under its own name (``my_rule.py`` as ``my_rule``) with
    its folder added to ``sys.path``, so that worker processes started later
    can import it too. Raises ``ValueError`` with the reason if it cannot be
    found or fails as it is imported.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"--extension takes a module name or a .py file, got {source!r}")
    path = Path(source).expanduser()
    try:
        if source.endswith(".py") or path.is_file():
            if not path.is_file():
                raise ValueError(f"--extension {source}: no such file")
            name = path.stem
            if not name.isidentifier():
                raise ValueError(f"--extension {source}: a file's name must be a Python module name "
                                 f"(letters, digits and _), got {path.name!r}")
            loaded = sys.modules.get(name)
            if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() == path.resolve():
                return loaded
            folder = str(path.resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)
            return importlib.import_module(name)
        return importlib.import_module(source)
    except ValueError:
        raise
    except ModuleNotFoundError as e:
        raise ValueError(f"--extension {source}: {e}") from e
    except Exception as e:  # noqa: BLE001 - an extension's own error, named
        raise ValueError(f"--extension {source} failed as it was imported: {type(e).__name__}: {e}") from e


def extensions_in(argv: list[str]) -> list[str]:
    """The values of every ``--extension X`` / ``--extension=X`` in ``argv`` (read before the parser is
    built, so that its choices and flags include what they register)."""
    found = []
    for i, token in enumerate(argv):
        if token == "--extension" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif token.startswith("--extension="):
            found.append(token.split("=", 1)[1])
    return found
