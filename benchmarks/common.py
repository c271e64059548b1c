"""What every benchmark script shares: writing its table as JSON, with the machine it ran on."""

from __future__ import annotations

import json
import platform


def write_json(path: str | None, benchmark: str, payload: dict) -> None:
    """Write ``payload`` to ``path`` (if given) as ``{"benchmark", "machine", **payload}``."""
    if path:
        with open(path, "w") as f:
            json.dump({"benchmark": benchmark, "machine": platform.platform(), **payload}, f, indent=2)
