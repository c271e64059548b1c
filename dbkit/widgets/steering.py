"""The panel's one steering worker: what a slider or button asked, applied in order, latest value winning.

A widget's handler runs on the kernel's main thread (or, with ipykernel 7 in
JupyterLab 4.6 and Notebook 7.6, on a subshell thread while a cell is busy);
it must return at once and never block or plot. So a handler only calls
``want(setting, value)`` or ``act(action)``. One worker thread, alive only
while there is work, applies the requests in the order they came: a setting
asked again before the worker reached it is applied once, with its latest
value; and it waits until the sliders have been still for ``quiet`` seconds,
so a drag over five values is one change, not five. Plain Python: no widgets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Request:
    """Settings to change together (``action`` is ``None``), or a button's action."""

    action: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


class Steering:
    """Requests waiting for ``apply(settings)`` or ``run(action)``; ``failed(request, error)`` hears of
    any that raised (the next one still runs)."""

    def __init__(self, apply: Callable[[dict[str, Any]], None], run: Callable[[str], None],
                 failed: Callable[[Request, BaseException], None], quiet: float = 0.1,
                 name: str = "dbkit-panel-steering") -> None:
        self._apply, self._run, self._failed = apply, run, failed
        self.quiet, self.name = quiet, name
        # lock order: leaf (the learner's requests waiting; applied with it released)
        self._lock = threading.Lock()
        self._waiting: list[Request] = []
        self._busy = False
        self._last_want = 0.0
        self._worker: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False

    def want(self, setting: str, value: Any) -> None:
        """A slider asks for ``setting = value``; returns at once."""
        with self._lock:
            if self._waiting and self._waiting[-1].action is None:
                self._waiting[-1].settings[setting] = value
            else:
                self._waiting.append(Request(settings={setting: value}))
            self._last_want = time.monotonic()
            self._wake()

    def act(self, action: str) -> None:
        """A button asks for ``action``; returns at once."""
        with self._lock:
            self._waiting.append(Request(action=action))
            self._wake()

    def pending(self) -> dict[str, Any]:
        """Settings asked and not applied yet, the latest value of each."""
        with self._lock:
            out: dict[str, Any] = {}
            for r in self._waiting:
                out.update(r.settings)
            return out

    def idle(self) -> bool:
        return self._idle.is_set()

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until every request so far is applied; False at the timeout."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Drop what waits, let the request in progress end, and take no more."""
        with self._lock:
            self._closed = True
            self._waiting.clear()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout)

    def _wake(self) -> None:  # with the lock held
        if self._closed:
            self._waiting.clear()
            return
        self._idle.clear()
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._drain, name=self.name, daemon=True)
            self._worker.start()

    def _next(self) -> tuple[Request | None, float]:
        """The request to apply now (settings asked again later removed), or how long to wait."""
        with self._lock:
            if not self._waiting:
                self._worker = None
                self._idle.set()
                return None, -1.0
            head = self._waiting[0]
            if head.action is None:
                still = time.monotonic() - self._last_want
                if still < self.quiet and len(self._waiting) == 1:
                    return None, self.quiet - still
            self._waiting.pop(0)
            later = {k for r in self._waiting for k in r.settings}
            if head.action is None:
                head = Request(settings={k: v for k, v in head.settings.items() if k not in later})
            return head, 0.0

    def _drain(self) -> None:
        while True:
            request, wait = self._next()
            if request is None:
                if wait < 0:
                    return
                time.sleep(wait)
                continue
            try:
                if request.action is not None:
                    self._run(request.action)
                elif request.settings:
                    self._apply(request.settings)
            except BaseException as e:  # noqa: BLE001 - told to the panel, which shows it
                self._failed(request, e)
