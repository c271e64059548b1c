"""The runtime protocol in virtual time: a job's drivers on simulated machines (``SimSession``).

Loaded lazily: the session needs the simulator.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SimSession"]


def __getattr__(name: str) -> Any:
    if name == "SimSession":
        from .session import SimSession

        return SimSession
    raise AttributeError(name)
