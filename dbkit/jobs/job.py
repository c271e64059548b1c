"""The one interface every dbkit job has, and what each algorithm fills in.

``start()`` (non-blocking), ``fit(steps, seconds, progress)``, ``wait(seconds, steps)`` (the job runs on),
``pause()``, ``resume()``, ``set(**changes)``, ``stop()``, ``history``, ``events``, ``snapshot()``,
``report()``, and use as a context manager: the CLI and the widgets use nothing else. ``dbkit.SyncSGD``,
``dbkit.DownpourSGD`` and ``dbkit.SandblasterLBFGS`` subclass ``Job`` and provide the hooks below.

Locks, always taken in this order (each declaration says its place, a test
checks it is said): ``_steer`` (one change, budget, start or stop at a time)
-> the algorithm's outer lock (Downpour's ``Fleet.launching``, sync SGD's step
lock, Sandblaster's batch lock) -> ``_sample_lock`` -> the parts it reads
(``Placement._lock``, then the replica book's; a simulation's run lock) ->
``_lock`` (state, config, latest figures) -> the event stream's. The other
locks of dbkit are leaves: they guard one object's fields and take no other
lock while held. Background threads (monitors, training loops) never take
``_steer``.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..config import RunConfig
from ..data import Dataset
from ..nn import Network
from ..settings import check
from ..telemetry import Change, Divergence, ErrorEvent, Sample, StateChange
from . import running
from .changes import ChangeQueue, ChangeRequest
from .figures import JobFigures
from .progress import Progress
from .snapshot import Snapshot


class Job(JobFigures):
    """A training run of one algorithm; see the module docstring for the interface, ``JobFigures`` for
    what it shows and ``JobHooks`` for what each algorithm fills in."""

    #: settings ``set()`` may change once the job has started (``paused`` too, for every job)
    steerable: ClassVar[tuple[str, ...]] = ()
    #: settings ``set()`` may change only before the job starts (they shape how it starts)
    before_start: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: RunConfig, data: Dataset, network: Network, sample_every: float = 0.5) -> None:
        super().__init__(config, data, network)
        self.sample_every = float(sample_every)
        self.started_at: float | None = None
        self._stopped = False
        # lock order: first of all (one change, budget, start or stop at a time); threads never take it
        self._steer = threading.RLock()
        self._changes = ChangeQueue(self._apply_request)
        self._user_paused = False
        self._finalizer: weakref.finalize | None = None
        #: the control panel showing this job, if any (``dbkit.widgets``); told when the job stops
        self.attached_panel: Any = None
        self._given: np.ndarray | None = None  # parameters to start from (``start_at``)

    def start_at(self, params: np.ndarray) -> Job:
        """Start (when started) from ``params`` (the network's order: a warm start's end, say); returns the job."""
        if self._state != "created":
            raise RuntimeError("start_at() must be called before the job starts")
        params = np.asarray(params, dtype=np.float32)
        if params.shape != (self.network.size,) or not np.isfinite(params).all():
            raise ValueError(f"start_at takes {self.network.size} finite parameters, got shape {params.shape}")
        self._given = params.copy()
        return self

    def _start_params(self) -> np.ndarray:
        """The parameters training starts from: ``start_at``'s, or the seed's."""
        return self._given.copy() if self._given is not None else self.network.init_params(self.config.seed)

    # ---- lifecycle ---------------------------------------------------------------------------
    @property
    def runtime(self) -> Any:
        """The session the job runs on once started (``None`` before, or in memory): its clock, its places, and
        on a simulated cluster its simulation (``shard_services()``: each shard behind its queue)."""
        return self._cluster()

    @property
    def stopped(self) -> bool:
        """Its replicas, shards and cluster are released."""
        return self._stopped

    def start(self) -> Job:
        """Place shards and replicas and start training in the background; returns at once."""
        return self._start(paused=False)

    def _start(self, paused: bool) -> Job:
        with self._steer:
            if self._stopped:
                raise RuntimeError(f"this {type(self).__name__} was stopped; make a new one")
            if self._state != "created":
                return self
            running.started(self)
            self.events.restart_clock()
            self.started_at, self._wall0 = time.time(), time.perf_counter()
            try:
                self._launch(paused)
            except BaseException:
                self._resources().release()
                self._stopped = True
                running.stopped(self)
                raise
            self._finalizer = weakref.finalize(self, self._resources().release)
            if not paused:
                self._clock.start()
            self._set_state("paused" if paused else "running")
        return self

    def fit(self, steps: int | None = None, seconds: float | None = None, progress: bool = True) -> list[dict]:
        """Train for ``steps`` more steps (over all replicas) or ``seconds``, then pause; returns the history.

        Without either, the config's ``steps`` / ``seconds``. Returns early if the
        job ends (diverges, finishes, fails) or is paused by ``pause()``.
        """
        if steps is None and seconds is None:
            steps, seconds = self.config.steps, self.config.seconds
        steps, seconds = check("steps", steps), check("seconds", seconds)
        self._start(paused=True)  # a job that fit starts waits for its step cap: exact with one replica
        begin = self._seconds()
        with self._steer:
            if self.ended:
                return self.history
            target = self._cap(steps)
            self._cap_seconds(seconds, begin)  # (None: a limit an earlier fit set is lifted)
            self._user_paused = False
            self._clock.start()
            self._set_state("running")  # (before time moves: on a simulated cluster, at the instant it resumes)
            self._hold(False)
        bar = Progress(self, steps, seconds) if progress else None
        try:
            self._poll(lambda: self._user_paused, target,
                       lambda: seconds is not None and self._seconds_done(begin, seconds), bar, begin, settle=True)
        finally:
            with self._steer:
                if not self.ended:
                    self._hold(True)
                    self._set_state("paused")
                self._clock.stop()
            if bar is not None:
                bar.close()
        if self._last_eval_step != self._progress() and self._known.lost is None:
            try:
                self._sample(evaluate=True)
            except Exception:
                if not self.ended:  # a job that failed (its shards lost) keeps the history it has
                    raise
        return self.history

    def wait(self, seconds: float | None = None, steps: int | None = None, progress: bool = True) -> list[dict]:
        """Wait while the started job trains on for ``seconds`` more of its clock or ``steps`` more steps (over
        all replicas), and leave it running (``fit`` pauses it); returns the history. For a notebook: a panel's
        job runs in the background and a later cell waits on it, with a progress bar, while the learner steers
        it. Returns early if the job ends, is stopped or is paused (its clock would not move)."""
        if seconds is None and steps is None:
            raise ValueError("wait for seconds=... or steps=... (the job runs on either way)")
        steps, seconds = check("steps", steps), check("seconds", seconds)
        if self._state == "created":
            raise RuntimeError("this job has not started: call start() first (or fit() to train and pause)")
        begin = self._seconds()
        target = None if steps is None else self._progress() + steps
        bar = Progress(self, steps, seconds) if progress else None
        try:
            self._poll(lambda: self._stopped or self._state == "paused", target,
                       lambda: seconds is not None and self._seconds() - begin >= seconds, bar, begin)
        finally:
            if bar is not None:
                bar.close()
        return self.history

    def _poll(self, halted: Callable[[], bool], target: int | None, done: Callable[[], bool],
              bar: Progress | None, begin: float, settle: bool = False) -> None:
        """Return once the job ended or ``halted()``, its scheduler is lost, ``target`` steps or ``done()``.
        With ``settle`` (a fit: the job's loops cap the steps), the target counts on virtual time once the job
        itself has stopped time there (``Runtime.resting``): a driver that saw the steps first would otherwise
        pause the job before or after an evaluation due at the target, as the threads happened to run."""
        cluster = self._cluster()
        settled = (lambda: cluster.resting()) if settle and cluster is not None and cluster.holds_time else None
        while not (self.ended or halted()):
            reached = target is not None and self._progress() >= target and (settled is None or settled())
            if self._check_connection() or reached or done():
                return
            if bar is not None:
                bar.update(self._seconds() - begin)
            time.sleep(0.05)

    def pause(self, wait: bool = True) -> None:
        """Pause training: replicas push what they accumulated and wait."""
        self.set(wait=wait, paused=True)

    def resume(self, wait: bool = True) -> None:
        """Let a paused job train on (with no step cap)."""
        self.set(wait=wait, paused=False)

    def set(self, wait: bool = True, **changes: Any) -> RunConfig:
        """Change settings while the job runs; queued and applied in order, the latest value winning.

        Values are checked at once: out of range, a ``ValueError`` naming the
        setting, and nothing changes. With ``wait`` (default) it returns the
        config once the change is applied; every request, applied or
        superseded by a later one, appears in ``events`` as a ``Change``.
        """
        steerable, before_start = self.steering()
        allowed = set(steerable) | {"paused"} | self._steerable_knobs()
        unknown = set(changes) - allowed - set(before_start)
        if unknown:
            raise ValueError(f"set() takes {sorted(allowed)}; {sorted(unknown)} cannot change while training")
        late = sorted(set(changes) & (set(before_start) - allowed))
        if late and self._state != "created":
            raise ValueError(f"{', '.join(late)} shapes how a job starts: set it before start(), or make a new "
                             f"run with job.new_run({late[0]}=...)")
        if self._stopped:
            raise RuntimeError(f"this {type(self).__name__} was stopped; its settings are final (make a new one)")
        if "paused" in changes and not isinstance(changes["paused"], bool):
            raise ValueError(f"paused must be True or False, got {changes['paused']!r}")
        if "paused" in changes and self._state == "created":
            raise RuntimeError("this job has not started: call start() or fit() first")
        pending = {k: v for k, v in {**self._changes.pending(), **changes}.items() if k != "paused"}
        self._check(self.config.replace(**pending))
        self._changes.submit(changes, self.events.now, wait=wait)
        return self.config

    def stop(self) -> None:
        """Stop the replicas (they push what they accumulated), keep the final figures, release everything."""
        with self._steer:
            if self._stopped:
                return
            try:
                if self._state != "created" and not self._check_connection(grace=0):
                    self._final = self._gather(stopping=True)
            except Exception as e:  # noqa: BLE001 - still release everything
                self._check_connection(grace=0)  # a scheduler lost meanwhile is the reason
                self.events.emit(ErrorEvent, where="stop", message=f"{type(e).__name__}: {e}")
            finally:
                if self._final is None and self._state != "created":
                    self._final = self._known_final()
                self._clock.stop()
                if self._finalizer is not None:
                    self._finalizer()
                self._stopped = True
                running.stopped(self)
                if not self.ended:
                    self._set_state("stopped")
        if self.attached_panel is not None:
            self.attached_panel.job_stopped(self)

    def attach_panel(self, panel: Any) -> None:
        """``panel`` shows this job (it is told when the job stops); ``None``: none does."""
        self.attached_panel = panel

    def detach_panel(self, panel: Any) -> None:
        if self.attached_panel is panel:
            self.attached_panel = None

    def new_run(self, **changes: Any) -> Job:
        """A new job of the same kind, not started: the same model, data and cluster settings, this
        job's settings with ``changes``. The panel's Start makes one when the run it shows has ended."""
        return self._new_like(self.config.replace(**changes))

    def panel(self) -> Any:
        """The live control panel of this job (``dbkit.widgets.Panel``); the same one on every call.

        Needs ipywidgets; ``stop()`` closes its threads (its last frame stays on screen).
        """
        from ..widgets import panel  # the one arrow up the layers: widgets are imported only when asked for

        return panel(self)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def snapshot(self) -> Snapshot:
        """The latest state, copied cheaply for a UI thread; never calls Dask."""
        errors = self.events.last(ErrorEvent)
        return Snapshot(self.algorithm, self._state, self.events.now(), self.config, self._progress(),
                        tuple(self._known_replicas()), self.events.last(Sample), self._last_eval,
                        {k: v for k, v in self._changes.pending().items()}, self.events.last(Change),
                        errors.message if errors is not None else None, len(self.events), self.dashboard,
                        self._simulation())

    # ---- the Dask scheduler ----------------------------------------------------------------
    def _check_connection(self, grace: float = 2.0) -> bool:
        """True (and the job ended as ``"scheduler lost"``) once the Dask scheduler has been out of
        reach ``grace`` seconds. Reads the client's status only, so any thread may call it often."""
        why = self._known.check(self._cluster(), grace)
        if why is None:
            return self._known.lost is not None
        self.events.emit(ErrorEvent, where="the Dask scheduler", message=why)
        self._set_state("failed", why)
        return True

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.network.name} on {self.data.name}: {self._state}, "
                f"{sum(f.live for f in self._replica_figures().values())} live replicas, {self._progress()} steps>")

    # ---- for the algorithms -------------------------------------------------------------------
    def _set_state(self, state: str, reason: str = "") -> None:
        with self._lock:
            if state == self._state or (self.ended and state in ("running", "paused")):
                return
            self._state = state
        cluster = self._cluster()
        if cluster is not None and self.ended:
            cluster.rest()  # (a simulated cluster's time stands still where the job ended)
        self.events.emit(StateChange, state=state, reason=reason)

    def _diverged(self, message: str) -> None:
        """Training has diverged: end the job and say what to do instead."""
        if self.ended:
            return
        advice = message if "Lower the learning rate" in message else (
            f"{message}. Lower the learning rate (lr={self.config.lr})"
            + (" or use Adagrad (optimizer='adagrad')" if self.config.optimizer == "sgd" else ""))
        self._set_state("diverged", advice)
        self.events.emit(Divergence, step=self._progress(), message=advice)

    def _reached(self, accuracy: float) -> None:
        if self.ended:
            return
        self._set_state("finished", f"test accuracy reached {accuracy:g}")

    def _gave_up(self, reason: str) -> None:
        if self.ended:
            return
        self._set_state("finished", f"gave up: {reason}")

    def _thread_failed(self, error: BaseException) -> None:
        """``on_error`` of a job's ``JobThread``: the job fails, saying which thread and why."""
        self._failed(f"thread {threading.current_thread().name}", error)

    def _failed(self, where: str, error: BaseException) -> None:
        if self._check_connection(grace=0):  # the error is the scheduler's loss, said once
            return
        self.events.emit(ErrorEvent, where=where, message=f"{type(error).__name__}: {error}")
        self._set_state("failed", f"{where}: {type(error).__name__}: {error}")

    def _apply_request(self, request: ChangeRequest, effective: dict, superseded: dict) -> None:
        """The steering thread applies one ``set()`` request (see ``changes.ChangeQueue``)."""
        with self._steer:
            for k, v in superseded.items():
                self.events.emit(Change, setting=k, old=self._current(k), new=v, asked=request.asked,
                                 applied=None, superseded=True)
            if not effective:
                return
            if self._stopped or self.ended:
                raise RuntimeError(f"this {type(self).__name__} has {self._state}; its settings are final")
            steerable, before_start = self.steering()
            late = sorted(set(effective) & (set(before_start) - set(steerable)))
            if late and self._state != "created":
                raise ValueError(f"{', '.join(late)} shapes how a job starts; this one has started")
            old = {k: self._current(k) for k in effective}
            new = self.config.replace(**{k: v for k, v in effective.items() if k != "paused"})
            self._check(new)
            if self._state != "created":
                try:
                    self._apply({k: v for k, v in effective.items() if k != "paused"}, new)
                except Exception as e:
                    self.events.emit(ErrorEvent, where="set " + ", ".join(f"{k}={v!r}" for k, v in effective.items()),
                                     message=f"{type(e).__name__}: {e}")
                    raise
            with self._lock:
                self.config = new
            if "paused" in effective and self._state != "created":
                self._user_paused = effective["paused"]
                if not self._user_paused:
                    self._cap(None)  # a step cap left by fit() is lifted: resume means train on
                if self._user_paused:
                    self._hold(True)
                    self._clock.stop()
                    self._set_state("paused")
            now = self.events.now()
            for k, v in effective.items():
                self.events.emit(Change, setting=k, old=old[k], new=v, asked=request.asked, applied=now)
            if effective.get("paused") is False and self._state != "created":  # (told before time moves on)
                self._clock.start()
                self._set_state("running")
                self._hold(False)

    def steering(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The settings ``set()`` may change while this job trains, and those it may change only before it starts
        (with those its machines declare fixed: a simulated cluster lays shards and partitions out once)."""
        fixed = tuple(getattr(self._machines, "fixed_settings", ()))
        return (tuple(s for s in self.steerable if s not in fixed),
                self.before_start + tuple(s for s in fixed if s in self.steerable))

    def _steerable_knobs(self) -> frozenset[str]:
        """Where the optimizer steers, so do the update rules' own knobs (``momentum``, ``eps``); where the
        replica loop does, its knobs (``inner_steps``: the replicas are renewed with them)."""
        from ..downpour.replica_kinds import registered_replicas, replica_class
        from ..ps.update_rule import registered_rules, rule_class

        classes = ([rule_class(n) for n in registered_rules()] if "optimizer" in self.steerable else []) + (
            [replica_class(n) for n in registered_replicas()] if "replica" in self.steerable else [])
        return frozenset(k.name for cls in classes for k in cls.knobs)

    def _current(self, setting: str) -> Any:
        """A setting's value now; ``None`` for a knob of a rule or loop not chosen yet (``set(replica="ssp",
        max_staleness=2)`` on a job running another loop: the knob had no value before)."""
        if setting == "paused":
            return self._user_paused
        try:
            return self.config.get(setting)
        except KeyError:
            return None
