"""How dbkit starts its LocalCluster's worker processes (their allocator, their profiler, their signals),
and how quiet Dask's own logging is on the command line."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Environment for worker processes dbkit starts (see Cluster.__init__); for your own
# cluster, set the same in the workers' environment.
WORKER_MALLOC = {"MALLOC_TRIM_THRESHOLD_": str(256 * 2**20), "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20)}
# Dask settings for the workers dbkit starts. Dask's statistical profiler samples every
# thread's stack every 10 ms by default, holding the GIL each time; a replica computing
# on a worker pays for it. Every 100 ms the dashboard's Profile page still fills, and
# the worker's event loop took 0.11-0.13 ms of CPU per replica step instead of 0.21-0.23
# (speech, 2 replicas, n = 4; ``benchmarks/thread_time.py``, issue #12).
WORKER_DASK_CONFIG = {"distributed.worker.profile.interval": "100ms"}


@contextmanager
def workers_ignore_group_signals() -> Iterator[None]:
    """Start worker processes with SIGINT and SIGTERM ignored.

    A terminal's Ctrl-C goes to its whole process group, and so does the SIGTERM
    of a batch system at a job's time limit; the LocalCluster's workers are in
    the driver's group: they died of it before the driver could stop the job and
    write its report. An ignored signal is inherited through the spawn of a
    worker process, and Python leaves an inherited ignore in place, so the signal
    reaches the driver alone; the workers are then shut down by ``close()`` (the
    nanny asks them to stop, then kills them: it never needs SIGTERM). Only the
    main thread can change signal handlers; elsewhere this does nothing. Both
    signals are ignored for the second or two the workers take to start.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def quiet_dask() -> None:
    """Dask's own INFO lines (a closed connection, with a traceback, when a scheduler or worker is
    lost) are noise on the command line: the run says in one line what happened. Its errors stay."""
    import distributed  # noqa: F401 - its import sets its loggers' levels from Dask's config; then ours

    logging.getLogger("distributed").setLevel(logging.ERROR)
