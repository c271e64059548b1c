"""What a job on a simulated cluster says of its simulation: its profile, machines and clocks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Simulated:
    """A simulated job's profile and machines (``dbkit.sim``), its virtual and real seconds so far, and
    ``speed``: virtual seconds per real second of simulating (``None`` before any)."""

    profile: str
    machines: int | None
    description: str
    virtual_seconds: float = 0.0
    real_seconds: float = 0.0

    @property
    def speed(self) -> float | None:
        return self.virtual_seconds / self.real_seconds if self.real_seconds > 0 else None

    def describe(self) -> str:
        pace = f", {self.speed:,.3g}x real time" if self.speed is not None else ""
        return (f"simulated: profile {self.profile}, "
                + (f"{self.machines} machines" if self.machines else "a machine for every part")
                + f", {self.virtual_seconds:,.2f} simulated s{pace}")
