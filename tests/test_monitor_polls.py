"""When a job's monitor polls in virtual time (``Monitor.aim_polls``): the steps a panel shows follow a jump in
the replicas' number (a warm start's one replica handing over to 200) within a few polls, not a slow poll later."""

from dbkit.jobs.monitor import Monitor


def _drive(monitor: Monitor, steps_at, replicas_at, until: float, eval_every: int) -> list[tuple[float, int]]:
    """Poll as a job's monitor thread does, in virtual time, until ``until``; the (instant, steps) of each poll."""
    now, polls = 0.0, []
    monitor.evaluated(0, 0.0, eval_every)
    while now < until:
        steps = steps_at(now)
        polls.append((now, steps))
        monitor.due(steps, now, eval_every, 0.5)
        now += monitor.interval(now, steps, replicas_at(now))
    return polls


def test_polls_follow_the_steps_when_200_replicas_take_over_from_one():
    change = 1.2  # one replica at 800 steps a second, then 200 at 30,000 (after 20 ms of fetching)

    def steps_at(t: float) -> int:
        return int(800 * min(t, change) + 30_000 * max(0.0, t - change - 0.02))

    def replicas_at(t: float) -> int:
        return 1 if t < change else 200

    monitor = Monitor()
    monitor.aim_polls()
    polls = _drive(monitor, steps_at, replicas_at, change + 0.3, eval_every=2000)
    after = [(t, s) for t, s in polls if t >= change]
    # within a tenth of a simulated second of the change, several polls (a slow poll is 0.25 s)
    assert sum(1 for t, _ in after if t < change + 0.1) >= 5
    # and once the rate is known, no two polls more than an evaluation's steps apart
    gaps = [b[1] - a[1] for a, b in zip(after, after[1:]) if a[0] > change + 0.1]
    assert gaps and max(gaps) <= 2000
    # before the change, one replica's polls were aimed as before: none hurried for nothing
    before = [t for t, _ in polls if 0.5 < t < change]
    assert len(before) <= 0.7 / 0.05


def test_a_steady_number_of_replicas_is_polled_as_before():
    """No change in the replicas, no ramp: the polls are the rate's (the simulated grid's reports depend on them)."""
    a, b = Monitor(), Monitor()
    a.aim_polls(), b.aim_polls()
    pa = _drive(a, lambda t: int(5000 * t), lambda t: 4, 2.0, eval_every=500)
    pb = _drive(b, lambda t: int(5000 * t), lambda t: None, 2.0, eval_every=500)
    assert pa == pb and len(pa) > 10
