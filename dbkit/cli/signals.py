"""How the command line stops on signals: Ctrl-C (SIGINT) and SIGTERM, once, twice, three times.

A terminal's Ctrl-C reaches every process of its group, the LocalCluster's
workers too (they ignore it: the driver stops them); a batch system sends
SIGTERM at a time limit. Either stops a run and keeps its report; a second
must not break the stop half way; a third must end it at once, leaving no
process behind.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

ABANDON_HINT = "dbkit: stopping, press Ctrl-C again to abandon the report"


@dataclass
class Presses:
    """The stop signals a run has had, oldest first, and whether its report is written yet."""

    names: list[str] = field(default_factory=list)
    reported: bool = False


@contextmanager
def stop_signals() -> Iterator[Presses]:
    """Ctrl-C (SIGINT) and SIGTERM (what a batch system sends at a time limit, and ``kill``) stop the run:
    the first raises ``KeyboardInterrupt`` (marked with its signal: exit 130 or 143), the job stops and
    the report is written. A second, while it stops, is not let through to break the stop half way (that
    lost reports and printed tracebacks): it says how to abandon. A third kills this run's processes (the
    LocalCluster's workers) and exits at once. Once a signal came, the handler stays to the end."""
    presses = Presses()

    def handler(signum: int, frame: object) -> None:
        presses.names.append(signal.Signals(signum).name)
        if len(presses.names) == 1:
            e = KeyboardInterrupt()
            e.signal_name = presses.names[0]  # type: ignore[attr-defined]
            raise e
        if len(presses.names) == 2:
            print(ABANDON_HINT, file=sys.stderr, flush=True)
            return
        _abandon(143 if presses.names[0] == "SIGTERM" else 130, presses.reported)

    if threading.current_thread() is not threading.main_thread():
        yield presses
        return
    before = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield presses
    finally:
        if not presses.names:  # after a signal, a later one may still come while this process ends
            for s, h in before.items():
                signal.signal(s, h)


def _abandon(status: int, reported: bool) -> None:
    """End now, on a third signal."""
    said = "the report was written" if reported else "no report written"
    print(f"dbkit: abandoned: {said}", file=sys.stderr, flush=True)
    end_now(status)


def end_now(status: int) -> None:
    """Exit with ``status`` at once: this process's children first (they would outlive an ``os._exit``),
    then this process, skipping the interpreter's finalization. A run that had a stop signal ends so:
    finalization puts back the default handlers, and a late Ctrl-C would then kill it with no status."""
    import psutil

    try:
        sys.stdout.flush()
        sys.stderr.flush()
        children = [c for c in psutil.Process().children(recursive=True) if not _is_resource_tracker(c)]
        for child in children:  # the resource tracker ends by itself once this process has gone
            try:
                child.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(children, timeout=5)
    finally:
        os._exit(status)


def _is_resource_tracker(process: object) -> bool:
    """multiprocessing's resource tracker: killed first, it makes the still living workers warn."""
    try:
        return "resource_tracker" in " ".join(process.cmdline())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a process gone meanwhile
        return False
