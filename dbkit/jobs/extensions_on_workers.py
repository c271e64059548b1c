"""A job's extensions (an update rule or a replica loop of one's own) checked on every worker before it starts
(issue #48): a worker that cannot import the module that defines them would otherwise fail with four lines of
Dask's deserialization and no module named. The check names the module, its file and the worker in one line.
Every job whose classes run on workers uses it: Downpour (its rule and replica loop) and SGD on a cluster (its
rule); Sandblaster's shards run dbkit's own rule only."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from ..runtime.protocol import Runtime


def extension_modules(classes: Iterable[type]) -> dict[str, str]:
    """The modules of ``classes`` that are not dbkit's own: name -> file (or "")."""
    out = {}
    for cls in classes:
        module = cls.__module__
        if not module.startswith("dbkit.") and module != "__main__":  # (a notebook's classes travel by value)
            out[module] = str(getattr(sys.modules.get(module), "__file__", "") or "")
    return out


def _import(module: str) -> str | None:  # runs on a worker
    import importlib

    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001 - said on the driver, in one line
        return f"{type(e).__name__}: {e}"
    return None


def check_extensions_on_workers(cluster: Runtime, classes: Iterable[type]) -> None:
    """``ValueError`` naming the first worker that cannot import the module of one of ``classes`` (a job's
    update rule, its replica loop) that is not dbkit's own."""
    for module, path in extension_modules(classes).items():
        answers: dict[str, Any] = cluster.run_on_workers(_import, module)
        for worker in sorted(answers):
            why = answers[worker]
            if why is not None:
                why = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
                where = f" ({path})" if path else ""
                raise ValueError(f"the extension module {module!r}{where} cannot be imported on worker {worker} "
                                 f"({why}); install it on every worker, or client.upload_file({path or module!r})")
