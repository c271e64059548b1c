"""When a job's monitor samples and evaluates, and which replicas changed state since last time.

A job's monitor thread polls the replicas' figures, every ``fast`` seconds
for a while after the job starts or changes and when a step target is near,
else every ``slow`` seconds (each poll is a call to every worker, which costs
the driver and the workers CPU that the replicas could use); this object
decides when it polls and what a poll means: a sample every
``sample_every`` seconds, an evaluation every ``eval_every`` steps (at most
every ``min_eval_interval`` seconds), a check of which workers are alive every half second, and
a ``ReplicaEvent`` for each replica that started or ended.
"""

from __future__ import annotations

from ..training.figures import LIVE, ReplicaFigures


class Monitor:
    """Cadences and replica states of one job's monitor thread."""

    fast = 0.05
    slow = 0.25

    def __init__(self, min_eval_interval: float = 0.2, worker_check_every: float = 0.5) -> None:
        self.min_eval_interval = min_eval_interval
        self.worker_check_every = worker_check_every
        self.target: int | None = None  # the total steps a ``fit`` is to reach, if any (``aim_at``)
        self.waypoint: int | None = None  # total steps at which the replicas wait for the rest of a target
        self._hurry_until = -1e9
        self._rate = 0.0  # steps per second, smoothed over polls
        self._last: tuple[float, int] | None = None
        self._replicas: int | None = None  # the live replicas the rate was measured with
        self._ramp: float | None = None  # after their number changed: the longest the next aimed poll may wait
        self._seen: dict[int, str] = {}
        self._next_eval_step = 0
        self._last_eval = self._last_sample = self._last_worker_check = -1e9
        self._aimed = False  # polls aimed at the next evaluation and target (``aim_polls``)

    def aim_at(self, target: int | None) -> int | None:
        """The total steps a ``fit`` is to reach (``None``: none); polls quicken as it nears."""
        self.target = target
        return target

    def transitions(self, figures: dict[int, ReplicaFigures]) -> list[tuple[int, str, ReplicaFigures]]:
        """``(replica, what, figures)`` for every replica that started (``what="started"``) or ended
        (``what`` its final state) since the last call."""
        out = []
        for index, f in sorted(figures.items()):
            before = self._seen.get(index)
            if before is None:
                out.append((index, "started", f))
            if f.state not in LIVE and before != f.state:
                out.append((index, f.state, f))
            self._seen[index] = f.state
        return out

    def due(self, steps: int, now: float, eval_every: int, sample_every: float) -> tuple[bool, bool]:
        """``(evaluate, sample)``: whether this tick evaluates the parameters, and whether it samples."""
        evaluate = steps >= self._next_eval_step and now - self._last_eval >= self.min_eval_interval
        if evaluate:
            self._next_eval_step, self._last_eval = steps + eval_every, now
        sample = evaluate or now - self._last_sample >= sample_every
        if sample:
            self._last_sample = now
        return evaluate, sample

    def evaluated(self, steps: int, now: float, eval_every: int) -> None:
        """The job evaluated at ``steps`` itself (at its start, say): the next evaluation is ``eval_every`` later."""
        self._next_eval_step, self._last_eval = steps + eval_every, now

    def hurry(self, now: float, seconds: float = 1.0) -> None:
        """Poll fast for the next ``seconds``: the job started, or something changed."""
        self._hurry_until = max(self._hurry_until, now + seconds)

    def aim_polls(self) -> None:
        """Aim each poll at the instant the next evaluation or step target should come, at the recent rate
        (virtual time: a timer would waste polls when steps are far apart and miss targets when they are
        close); at least ``SHORTEST`` apart, at most ``slow``. An evaluation there takes no virtual time, so
        none is held back to spare the workers (``min_eval_interval``)."""
        self._aimed = True
        self.min_eval_interval = 0.0

    SHORTEST = 1e-4
    NEAR = 16  # steps from a mark at which an aimed poll aims at the mark itself

    def interval(self, now: float, steps: int, replicas: int | None = None) -> float:
        """Seconds until the next poll, given the total ``steps`` now and the ``replicas`` live: ``fast`` while
        hurried or when ``target`` is less than two slow polls away at the recent rate, else ``slow``.

        The rate is the replicas': when their number changes (a warm start's one replica handing over to
        200, a slider move), the rate measured with the old number is dropped, a rate over twice the smoothed
        one is taken at once, and the aimed polls' intervals grow from ``10 * SHORTEST``, doubling, to what the
        rate says (new replicas step slowly at first, while they fetch). Otherwise aimed polls stayed a slow
        poll apart (a quarter of a simulated second: 25 real seconds at 200 simulated replicas) while the
        steps shown stood still."""
        if replicas is not None and replicas != self._replicas:
            if self._replicas is not None:
                self._rate, self._last, self._ramp = 0.0, None, self.SHORTEST * 10
            self._replicas = replicas
        if self._last is not None and now > self._last[0]:
            rate = (steps - self._last[1]) / (now - self._last[0])
            self._rate = rate if self._rate == 0.0 or rate > 2 * self._rate else 0.7 * self._rate + 0.3 * rate
        self._last = (now, steps)
        if self._aimed:
            marks = (self._next_eval_step, self.target, self.waypoint)
            ahead = [t - steps for t in marks if t is not None and t > steps]
            if self._rate <= 0.0:
                return self.SHORTEST * 10  # (the rate is known after two polls)
            if not ahead:
                return self.fast
            # half way while far (a budget shares again by the replicas' speeds there), then at the mark
            steps_to = min(ahead) if min(ahead) <= self.NEAR else min(ahead) / 2
            wait = max(self.SHORTEST, min(self.slow, steps_to / self._rate))
            if self._ramp is not None:
                if wait <= self._ramp:
                    self._ramp = None
                else:
                    self._ramp *= 2
                    wait = self._ramp
            return wait
        if now < self._hurry_until:
            return self.fast
        if self.target is not None and self.target - steps <= 2 * self.slow * max(self._rate, 0.0):
            return self.fast
        return self.slow

    def worker_check_due(self, now: float) -> bool:
        """Whether this poll asks the scheduler which workers are alive (a call, so not on every poll)."""
        if now - self._last_worker_check < self.worker_check_every:
            return False
        self._last_worker_check = now
        return True
