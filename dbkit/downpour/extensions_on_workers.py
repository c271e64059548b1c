"""A job's extensions (an update rule or a replica loop of one's own) checked on every worker before it starts
(issue #48): a worker that cannot import the module that defines them would otherwise fail with four lines of
Dask's deserialization and no module named. The check names the module, its file and the worker in one line."""

from __future__ import annotations

import sys
from typing import Any

from ..config import RunConfig
from ..runtime.protocol import Runtime


def extension_modules(config: RunConfig) -> dict[str, str]:
    """The modules of the job's rule and replica loop that are not dbkit's own: name -> file (or "")."""
    from ..ps.update_rule import rule_class
    from .replica_kinds import replica_class

    classes: list[type] = [rule_class(config.optimizer)]
    if config.algorithm == "downpour":
        classes.append(replica_class(config.downpour.replica))
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


def check_extensions_on_workers(cluster: Runtime, config: RunConfig) -> None:
    """``ValueError`` naming the first worker that cannot import one of the job's extension modules."""
    for module, path in extension_modules(config).items():
        answers: dict[str, Any] = cluster.run_on_workers(_import, module)
        for worker in sorted(answers):
            why = answers[worker]
            if why is not None:
                why = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
                where = f" ({path})" if path else ""
                raise ValueError(f"the extension module {module!r}{where} cannot be imported on worker {worker} "
                                 f"({why}); install it on every worker, or client.upload_file({path or module!r})")
