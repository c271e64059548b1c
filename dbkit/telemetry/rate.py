"""Rates over a trailing window: what the panel and its status line show as "examples per second".

A sample's own rate (examples since the last sample over the time since it) is
noisy, and on a simulated cluster a change can be followed by a sample a few
microseconds of virtual time later that carries a catch-up burst of examples:
one frame of 1e7-1e9 examples per second beside a steady level of 1e4-1e5, a
spike that flattens everything else on the plot (issue #44). A rate over the
last few samples divides their examples by their time together, so a burst
counts at its true weight.
"""

from __future__ import annotations

from collections.abc import Sequence

WINDOW = 8  # samples: about 4 s of a panel's sampling (one every 0.5 s)


def trailing_rate(t: Sequence[float], count: Sequence[float], window: int = WINDOW) -> float:
    """``count``'s growth per unit of ``t`` over the last ``window`` intervals (all of them, when fewer);
    0.0 before two samples or when no time passed."""
    if len(t) < 2:
        return 0.0
    first = max(0, len(t) - 1 - window)
    dt = t[-1] - t[first]
    return float(count[-1] - count[first]) / dt if dt > 0 else 0.0
