"""Changes asked of a running job, applied one at a time, in the order asked.

A slider moved twice quickly, or ``set()`` called from several threads, must
never be refused for timing nor interleave with a change in progress: each
request joins a queue and one steering thread applies them in order. When
several requests wait, a setting asked again later wins: the earlier value is
reported as superseded and never applied. The steering thread lives only
while there is work, and holds the job only weakly between changes, so a
forgotten job can still be garbage collected.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChangeRequest:
    """One call of ``set()``: its settings, when it was asked (job seconds), and how it ended."""

    changes: dict[str, Any]
    asked: float
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class ChangeQueue:
    """Requests waiting for ``apply(request, effective, superseded)``, a method of the job.

    ``effective`` is the part of the request to apply, ``superseded`` the
    settings a later waiting request asks again. ``apply`` raising fails that
    request alone (its caller gets the error); the next request still runs.
    """

    def __init__(self, apply: Callable[[ChangeRequest, dict, dict], None]) -> None:
        self._apply = weakref.WeakMethod(apply)
        # lock order: leaf (the queue of requests; a request is applied with it released)
        self._lock = threading.Lock()
        self._waiting: list[ChangeRequest] = []
        self._applying: ChangeRequest | None = None
        self._worker: threading.Thread | None = None

    def submit(self, changes: dict[str, Any], clock: Callable[[], float], wait: bool = True,
               timeout: float | None = None) -> ChangeRequest:
        """Queue ``changes`` (asked at ``clock()``, read in queue order); with ``wait``, return once
        applied (re-raising its error)."""
        with self._lock:
            request = ChangeRequest(dict(changes), clock())
            self._waiting.append(request)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._drain, name="dbkit-steering", daemon=True)
                self._worker.start()
        if wait:
            if not request.done.wait(timeout):
                raise TimeoutError(f"the change {changes} was not applied within {timeout} s")
            if request.error is not None:
                raise request.error
        return request

    def pending(self) -> dict[str, Any]:
        """Settings asked and not yet applied, the latest value of each (the one in progress included)."""
        with self._lock:
            requests = ([self._applying] if self._applying else []) + self._waiting
        out: dict[str, Any] = {}
        for r in requests:
            out.update(r.changes)
        return out

    def idle(self) -> bool:
        with self._lock:
            return not self._waiting and self._applying is None

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._waiting:
                    self._worker = None
                    return
                request = self._waiting.pop(0)
                later = {k for r in self._waiting for k in r.changes}
                self._applying = request
            effective = {k: v for k, v in request.changes.items() if k not in later}
            superseded = {k: v for k, v in request.changes.items() if k in later}
            apply = self._apply()
            try:
                if apply is None:
                    raise RuntimeError("the job is gone")
                apply(request, effective, superseded)
            except BaseException as e:  # noqa: BLE001 - handed to the caller who asked
                request.error = e
            finally:
                del apply
                with self._lock:
                    self._applying = None
                request.done.set()
