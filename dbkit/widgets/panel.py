"""The live control panel: sliders and buttons that steer a running job, and plots that answer.

Threads (measured in ``WIDGETS.md``): a widget handler only records what was
asked (``Steering.want`` / ``act``) and returns; one steering worker applies
requests through the job's public interface (``set``, ``pause``, ``resume``,
``stop``, ``lose_replica``, ``new_run``); one refresh thread per panel reads
``job.snapshot()`` about four times a second for the status line and controls
and, about twice a second, ``job.events`` for the plots: it draws a PNG with
matplotlib and sets it on an ``ipywidgets.Image``, which reaches the browser
even while another cell is busy. The panel never calls Dask itself and never
prints from a thread: everything it says goes into its status line, which the
steering worker also writes as soon as a change is done (not after a frame).
Locks, never nested: ``_draw_lock`` (the run series and the figure),
``_status_lock`` (the status line).
"""

from __future__ import annotations

import base64
import contextlib
import threading
import weakref
from typing import TYPE_CHECKING, Any

from .live_figure import LiveFigure
from .panel_widgets import panel_widgets, pressable
from .refresh import differs, refresh_loop
from .series import RunSeries
from .status import dashboard_html, status_html, summary
from .steering import Request, Steering

if TYPE_CHECKING:
    from ..jobs import Job, Snapshot

REFRESH_SECONDS = 0.5  # between frames (a frame of the whole figure costs 0.1-0.25 s of this machine)
STATUS_SECONDS = 0.25  # between status line refreshes: the words answer a move sooner than the plots
KEEP_PAST = 3  # finished runs kept, faded, on the plots


class Panel:
    """A control panel bound to ``job``; ``dbkit.widgets.panel(job)`` or ``job.panel()`` make one.

    Attributes a test or a notebook may use: ``controls`` (setting -> widget),
    ``buttons`` (name -> button), ``straggler``, ``status`` (an ``HTML``
    widget), ``image`` (the plots), ``frames`` (PNGs drawn), ``refreshes`` (status updates), ``job`` (the run
    shown now: Start after a run ended makes a new one, and the old run stays
    on the plots, faded).
    """

    def __init__(self, job: Job, refresh: float = REFRESH_SECONDS, status_every: float = STATUS_SECONDS) -> None:
        if not (refresh > 0 and status_every > 0):
            raise ValueError(f"the panel's refresh periods must be positive seconds, got {refresh!r}, {status_every!r}")
        self.algorithm, self.refresh, self.status_every = job.algorithm, refresh, status_every
        self.job = job
        self.next_run: dict[str, Any] = {}  # settings asked after the run ended: for the next one
        self.note, self.note_error = "", False
        self.frames = 0
        self.refreshes = 0  # status line and controls brought up to date (a frame drawn only if anything is new)
        self._local = threading.local()  # ``internal``: the panel itself is setting a widget
        # lock order: both before the event stream's only; never held together (the run's series and the figure;
        # the status line)
        self._draw_lock, self._status_lock = threading.Lock(), threading.Lock()
        self._halt, self.wake = threading.Event(), threading.Event()
        self._refresher: threading.Thread | None = None
        self._closed = False
        self._png = b""
        self._display: Any = None
        simulated = job.snapshot().simulation
        self.figure = LiveFigure(self.algorithm, clock="simulated seconds" if simulated else "seconds")
        self.run = RunSeries(job.describe(), self.algorithm, job.config.target_accuracy)
        self.past: list[RunSeries] = []
        self.steering = Steering(self._apply_settings, self._run_action, self._refused)

        simulated_machines = simulated.machines if simulated is not None else None
        widgets = panel_widgets(self.algorithm, job.config, simulated_machines, simulated is not None)
        self.controls, self.straggler, self.buttons = widgets.controls, widgets.straggler, widgets.buttons
        self.status, self.dashboard, self.image = widgets.status, widgets.dashboard, widgets.image
        self.box = widgets.box
        for setting, control in self.controls.items():
            control.observe(self._on_value(setting), names="value")
        if self.straggler is not None:
            for part in (self.straggler.replica, self.straggler.factor):
                part.observe(self._on_straggler, names="value")
        for name, button in self.buttons.items():
            button.on_click(self._on_button(name))
        job.attach_panel(self)
        self.tick()
        self.start_refresh()

    # ---- what a widget's handler does: record and return --------------------------------------
    def _on_value(self, setting: str) -> Any:
        def handler(change: dict) -> None:
            if not getattr(self._local, "internal", False):
                self.steering.want(setting, change["new"])
        return handler

    def _on_straggler(self, change: dict) -> None:
        if not getattr(self._local, "internal", False) and self.straggler is not None:
            self.steering.want("slow_replicas", self.straggler.value())

    def _on_button(self, name: str) -> Any:
        def handler(_: Any) -> None:
            self.steering.act(name)
        return handler

    @contextlib.contextmanager
    def _internal(self):
        """The panel sets widgets itself: their handlers must not take it for the learner."""
        self._local.internal = True
        try:
            yield
        finally:
            self._local.internal = False

    # ---- the steering worker ------------------------------------------------------------------
    def _apply_settings(self, settings: dict[str, Any]) -> None:
        job = self.job
        steerable, before_start = job.steering()
        later = {k: v for k, v in settings.items() if job.ended or job.stopped
                 or (k in before_start and k not in steerable and job.state != "created")}
        now = {k: v for k, v in settings.items() if k not in later}
        if later:
            self.next_run.update(later)
            self.say(", ".join(f"{k}={v!r}" for k, v in later.items()) + ": for the next run (press Start)")
        if not now:
            return
        try:
            job.set(**now)
        except ValueError:
            if len(now) == 1:
                raise
            for k, v in now.items():  # one refused value must not hold back the others
                try:
                    job.set(**{k: v})
                except ValueError as e:
                    self._refused(Request(settings={k: v}), e)
            return
        self.say(", ".join(f"{k}={v!r}" for k, v in now.items()) + " applied")

    def _run_action(self, action: str) -> None:
        job = self.job
        if action == "start":
            if job.state == "created":
                self.say("starting …")
                job.start()
                self.say("started")
            elif job.ended or job.stopped:
                self._start_next_run()
            else:
                self.say("already running: Stop it first to start a new run")
        elif action == "pause":
            job.pause()
            self.say("paused")
        elif action == "resume":
            job.resume()
            self.say("resumed")
        elif action == "stop":
            job.stop()
            self.say("stopped: Start runs again with the settings shown")
        elif action == "lose a replica":
            index = job.lose_replica()  # type: ignore[attr-defined]
            self.say(f"replica {index} lost (its task killed): the others train on")

    def _start_next_run(self) -> None:
        old = self.job
        if not old.stopped:
            old.stop()
        self.say("starting a new run …")
        new = old.new_run(**self.next_run)
        self.next_run = {}
        with self._draw_lock:
            self.past = (self.past + [self.run])[-KEEP_PAST:]
            self.run = RunSeries(new.describe(), self.algorithm, new.config.target_accuracy)
        old.detach_panel(self)
        self.job = new
        new.attach_panel(self)
        self.start_refresh()
        new.start()
        self.say("a new run started; the last one stays on the plots, faded")

    def _refused(self, request: Request, error: BaseException) -> None:
        """A request raised: say why in the status line and put its controls back as the job has them."""
        what = request.action or ", ".join(f"{k}={v!r}" for k, v in request.settings.items())
        self.say(f"refused {what}: {error}", error=True)
        self._sync_controls(self.job.snapshot(), force=set(request.settings))

    def say(self, note: str, error: bool = False) -> None:
        self.note, self.note_error = note, error
        self._show_status(self.job.snapshot())  # now, not after a frame the refresh thread may be drawing
        self.wake.set()

    def _show_status(self, snapshot: Snapshot) -> None:
        """Write the status line (from the refresh thread, or the steering thread when a change is done)."""
        run = self.run
        rate = run.rate[-1] if run.rate else None
        with self._status_lock:
            text = status_html(snapshot, self.note, self.note_error, run.reached, rate, run.setback())
            if self.status.value != text:
                self.status.value = text

    # ---- the refresh thread -------------------------------------------------------------------
    def stop_refresh(self) -> None:
        """End the refresh thread (after its frame in progress); ``start_refresh()`` starts it again."""
        self._halt.set()
        self.wake.set()
        refresher = self._refresher
        if refresher is not None and refresher is not threading.current_thread():
            refresher.join(10)

    def start_refresh(self) -> None:
        """Refresh the status line (every ``status_every`` s) and the plots (every ``refresh`` s) from a thread
        of the panel's own."""
        if self._closed or (self._refresher is not None and self._refresher.is_alive()):
            return
        self._halt.clear()
        self._refresher = threading.Thread(target=refresh_loop, args=(weakref.ref(self), self._halt),
                                           name="dbkit-panel-refresh", daemon=True)
        self._refresher.start()

    def tick(self, draw: bool = True) -> bool:
        """Read the job, update the status line and controls and, with ``draw``, draw a frame if anything
        new came; False once the job has stopped (its last frame drawn)."""
        job = self.job
        snapshot = job.snapshot()
        self._show_status(snapshot)  # words first: they answer a move soonest
        self.refreshes += 1
        link = dashboard_html(snapshot)
        if self.dashboard.value != link:
            self.dashboard.value = link
        self._sync_controls(snapshot)
        self._enable(snapshot.state, snapshot.live_replicas)
        if not draw and not job.stopped:
            return True
        with self._draw_lock:
            new = self.run.update(job.events)
            if new:
                self.run.label = job.describe()  # the title says the settings as they are now, not at start
            if new or not self._png:
                self._png = self.figure.draw(self.run, self.past)
                self.image.value = self._png
                self.frames += 1
        return not job.stopped

    def _sync_controls(self, snapshot: Snapshot, force: frozenset[str] | set[str] = frozenset()) -> None:
        """Show each setting as the job has it, unless the learner's value is still being applied."""
        job = self.job
        busy = set(self.steering.pending()) | set(snapshot.changing)
        with self._internal():
            for setting, control in self.controls.items():
                if setting in busy and setting not in force:
                    continue
                try:
                    value = self.next_run.get(setting, job.config.get(setting))
                except KeyError:  # a knob of a rule or loop the job does not have (now): hidden
                    control.disabled, control.layout.display = True, "none"
                    continue
                control.layout.display = None
                control.disabled = value is None  # an optional knob left unset: no slider value says so
                if value is not None and differs(control.value, value):
                    control.value = value
            if self.straggler is not None and ("slow_replicas" not in busy or "slow_replicas" in force):
                slow = dict(self.next_run.get("slow_replicas", job.config.slow_replicas))
                if slow != self.straggler.value():
                    self.straggler.show(slow)

    def _enable(self, state: str, live: int) -> None:
        wanted = pressable(state, self.job.stopped, live)
        for name, b in self.buttons.items():
            if b.disabled == wanted[name]:
                b.disabled = not wanted[name]

    # ---- the job stops; the panel closes ------------------------------------------------------
    def job_stopped(self, job: Job) -> None:
        """``job.stop()`` calls this: the refresh thread ends after drawing the last frame."""
        if job is not self.job:
            return
        self.stop_refresh()
        self.keep_frame()

    def keep_frame(self) -> None:
        """Draw the job as it is now and make that frame the panel's static view (what a saved or rendered
        notebook shows without a kernel); a live front end goes on showing the same widgets."""
        self.tick()
        if self._display is not None:
            with contextlib.suppress(Exception):
                self._display.update(self._repr_mimebundle_(), raw=True)

    def close(self) -> None:
        """Stop the panel's threads and close its widgets (the job goes on)."""
        self._closed = True
        self.steering.close()
        self.stop_refresh()
        self.job.detach_panel(self)
        widgets = [self.box, self.status, self.dashboard, self.image, *self.controls.values(), *self.buttons.values()]
        if self.straggler is not None:
            widgets += [self.straggler.box, self.straggler.replica, self.straggler.factor]
        for widget in widgets:
            widget.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Wait until every request made so far has been applied (or refused)."""
        return self.steering.wait_idle(timeout)

    # ---- static views -------------------------------------------------------------------------
    def png(self) -> bytes:
        """The last frame drawn."""
        return self._png

    def text(self) -> str:
        rate = self.run.rate[-1] if self.run.rate else None
        return (f"dbkit panel: {self.job.describe()}\n{summary(self.job.snapshot(), self.run.reached, rate)}\n"
                "(a picture of the last frame; run the notebook for a live panel)")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        data = dict(self.box._repr_mimebundle_(**kwargs) or {})
        data["image/png"] = base64.b64encode(self._png).decode("ascii")
        data["text/plain"] = self.text()
        return data

    def _ipython_display_(self) -> None:
        from IPython.display import display

        self._display = display(self._repr_mimebundle_(), raw=True, display_id=True)

    def __repr__(self) -> str:
        return f"<dbkit Panel of {self.job!r}>"
