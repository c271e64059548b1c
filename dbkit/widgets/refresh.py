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
    """The refresh thread: about twice a second, or at once when woken; holds the panel only weakly.
    The cadence counts from the start of each refresh, so a slow frame (the whole figure redrawn while
    training takes the cores) does not add its own time to the next wait."""
    while not halt.is_set():
        panel = ref()
        if panel is None:
            return
        began = time.monotonic()
        try:
            if not panel.tick():
                return
        except Exception as e:  # noqa: BLE001 - shown in the status line, never printed from a thread
            panel.say(f"the panel's refresh failed: {type(e).__name__}: {e}", error=True)
            return
        wake = panel.wake
        refresh = panel.refresh
        del panel
        wake.wait(max(0.05, refresh - (time.monotonic() - began)))
        wake.clear()
