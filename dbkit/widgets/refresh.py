"""The panel's refresh thread, and how it tells a control's shown value from the job's."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any


def differs(shown: Any, value: Any) -> bool:
    """A control shows something else than ``value`` (floats within a relative 1e-9 are the same)."""
    if isinstance(value, float) and isinstance(shown, (int, float)) and not isinstance(shown, bool):
        return abs(shown - value) > 1e-9 * max(1.0, abs(value))
    return shown != value


def refresh_loop(ref: weakref.ref, halt: threading.Event) -> None:
    """The refresh thread: the status line about four times a second and a frame about twice (or both at
    once when woken); holds the panel only weakly. Each cadence counts from the start of its last refresh,
    so a slow frame (the whole figure redrawn while training takes the cores) does not add its own time to
    the next wait, and the words never wait more than one frame for the plots."""
    last_frame = -float("inf")
    while not halt.is_set():
        panel = ref()
        if panel is None:
            return
        began = time.monotonic()
        woken = panel.wake.is_set()
        panel.wake.clear()
        draw = woken or began - last_frame >= panel.refresh - 1e-3
        try:
            if not panel.tick(draw=draw):
                return
        except Exception as e:  # noqa: BLE001 - shown in the status line, never printed from a thread
            panel.say(f"the panel's refresh failed: {type(e).__name__}: {e}", error=True)
            return
        if draw:
            last_frame = began
        wake, every = panel.wake, min(panel.status_every, panel.refresh)
        del panel
        wake.wait(max(0.05, every - (time.monotonic() - began)))
