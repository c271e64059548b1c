"""The jobs running in this process: a second one started warns, ``stop_all()`` stops them all.

A notebook cell run twice makes a second job while the first one trains on,
unseen, sharing the machine's cores. Starting a job while another one of this
process holds replicas warns, naming it and how to stop it. Jobs are held
weakly: a job nobody refers to is garbage collected and stops its replicas.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from typing import Any

_jobs: weakref.WeakSet[Any] = weakref.WeakSet()
# lock order: leaf (this process's running jobs; warnings are given after it is released)
_lock = threading.Lock()


class AnotherJobRunning(UserWarning):
    """A job was started while another job of this process was still running."""


def started(job: Any) -> None:
    """Note that ``job`` started; warn if others of this process are still running."""
    with _lock:
        others = [j for j in list(_jobs) if j is not job and not j.stopped]
        _jobs.add(job)
    for other in others:
        warnings.warn(f"another dbkit job is still running in this process: {other!r}. Both share the machine; "
                      "stop it with its .stop(), or stop every job with dbkit.stop_all().", AnotherJobRunning,
                      stacklevel=4)


def stopped(job: Any) -> None:
    with _lock:
        _jobs.discard(job)


def running() -> list[Any]:
    """The jobs of this process that have started and not been stopped, oldest first."""
    with _lock:
        return sorted((j for j in list(_jobs) if not j.stopped), key=lambda j: j.started_at or 0.0)


def stop_all() -> int:
    """Stop every running job of this process (their replicas, shards and clusters); returns how many."""
    jobs = running()
    for job in jobs:
        job.stop()
    return len(jobs)
