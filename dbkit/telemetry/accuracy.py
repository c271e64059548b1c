"""Time to a target accuracy: the paper's measure of an optimizer (its Fig. 4 and 5).

A run reaches a target at its first evaluation whose test accuracy is at
least the target; the time is that evaluation's ``t`` (seconds since the job
started training) and its ``step``. Evaluations are every ``eval_every``
steps, so the resolution is one evaluation interval.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

LADDER = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)


@dataclass(frozen=True)
class TimeToAccuracy:
    """When a run first reached ``target`` test accuracy (``seconds``/``step`` are ``None``: never)."""

    target: float
    seconds: float | None
    step: int | None

    @property
    def reached(self) -> bool:
        return self.seconds is not None

    def to_dict(self) -> dict:
        return {"target": self.target, "seconds": self.seconds, "step": self.step}


def time_to_accuracy(history: Iterable[dict], target: float) -> TimeToAccuracy:
    """When ``history`` (rows with ``t``, ``step``, ``test_accuracy``) first reached ``target``.

    Parameters
    ----------
    history : iterable of dict
        A job's ``history`` or a report's ``history``, in time order.
    target : float
        A test accuracy in (0, 1].
    """
    if not 0 < target <= 1:
        raise ValueError(f"target accuracy must be in (0, 1], got {target}")
    for row in history:
        accuracy = row.get("test_accuracy")
        if accuracy is not None and accuracy >= target:
            return TimeToAccuracy(float(target), float(row["t"]), int(row["step"]))
    return TimeToAccuracy(float(target), None, None)


def times_to_accuracy(history: Sequence[dict], target: float | None = None) -> list[TimeToAccuracy]:
    """Time to each accuracy of ``LADDER``, and to ``target`` when given (a report's ``time_to_accuracy``)."""
    targets = sorted(set(LADDER) | ({float(target)} if target is not None else set()))
    return [time_to_accuracy(history, t) for t in targets]
