"""Run the job a ``RunConfig`` describes, end to end, and return its JSON report.

What the CLI runs and what a notebook calls for the same report the CLI
writes. The job's cluster is closed before returning, also on error and on
Ctrl-C (an interrupted run still reports what it did, marked ``interrupted``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .config import RunConfig
from .jobs import Job

JOBS = {"sgd": ("dbkit.sync_sgd.job", "SyncSGD"), "downpour": ("dbkit.downpour", "DownpourSGD"),
        "sandblaster": ("dbkit.sandblaster", "SandblasterLBFGS")}


def make_job(config: RunConfig, client: Any = None, resume: str | None = None) -> Job:
    """The job (not started) for ``config.algorithm``, on ``config.dataset`` with ``config.model``; with
    ``resume``, one that starts from the checkpoint in that folder (checked before anything starts)."""
    import importlib

    module, name = JOBS[config.algorithm]
    cls = getattr(importlib.import_module(module), name)
    job = cls(config.model, config.dataset, config=config, client=client)
    if resume is not None:
        if not hasattr(job, "start_from"):
            raise ValueError(f"--resume takes a Downpour or Sandblaster checkpoint; {config.algorithm} cannot "
                             "resume from one")
        job.start_from(resume)
    return job


def run(config: RunConfig, progress: bool = True, log: Callable[[str], None] = print, client: Any = None,
        resume: str | None = None, full_report: bool = False) -> dict:
    """Train as ``config`` says (``steps`` or ``seconds``), stop, and return the report.

    Ctrl-C (and SIGTERM, as the CLI turns it into one) stops the run: the report says
    ``"interrupted": true`` and the signal. An unforeseen error while training also
    stops it, and the report holds what was done, with ``"error"``; one before anything
    started (bad input found late, an address where no scheduler answers) is raised.
    """
    job = make_job(config, client, resume)
    d = job.data
    log(f"dataset {d.name}: {d.n_train} train / {len(d.y_test)} test, {d.n_features} features, {d.n_classes} "
        f"classes; model {job.network.name}: {job.network.size:,} parameters")
    log(job.describe())
    interrupted: str | None = None
    error: str | None = None
    with job:
        try:
            job.fit(progress=progress)
        except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as the command line turns it into one
            interrupted = getattr(e, "signal_name", "SIGINT")
            log(f"interrupted ({interrupted}): stopping and reporting what was done")
        except Exception as e:  # anything unforeseen once training started: stop, and report what was done
            if job.state == "created":  # nothing started (a scheduler address that is not one): no report
                raise
            error = f"{type(e).__name__}: {e}"
    report = job.report(full=full_report)
    report["interrupted"] = interrupted is not None
    if interrupted is not None:
        report["signal"] = interrupted
    if error is not None:
        report["error"] = error
    return report
