"""Jobs: the one interface (start, fit, pause, resume, set, stop, history, events, snapshot,
report) that every algorithm is driven by, and what makes it safe to steer from any thread.

Plain Python (no Dask): ``Job`` (how a job is driven, over ``JobFigures``: what it shows) is the
base of ``dbkit.SyncSGD``,
``dbkit.DownpourSGD`` and ``dbkit.SandblasterLBFGS``; ``ChangeQueue`` applies
``set()`` requests in order; ``running`` knows the jobs of this process.
"""

from .changes import ChangeQueue, ChangeRequest
from .figures import ENDED, JobFigures
from .gate import Gate, Stopping
from .hooks import JobHooks
from .job import Job
from .monitor import Monitor
from .running import AnotherJobRunning, running, stop_all
from .setup import job_from_checkpoint, resolve_job
from .snapshot import FinalState, Simulated, Snapshot
from .stopwatch import Stopwatch

__all__ = ["AnotherJobRunning", "ChangeQueue", "ChangeRequest", "ENDED", "FinalState", "Gate", "Job", "JobFigures",
           "JobHooks", "Monitor", "Simulated", "Snapshot", "Stopping", "Stopwatch", "job_from_checkpoint",
           "resolve_job", "running", "stop_all"]
