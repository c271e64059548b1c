"""The blocking part of ``DownpourSGD.fit``: run until a step or time budget, with a progress bar."""

from __future__ import annotations

import time

NO_CAP = 2**62  # "no step cap" for a replica (shared with the Downpour driver)


def _set_caps(d, steps: int | None) -> None:
    """Cap each live replica at its steps + ``steps`` (exact for one replica)."""
    figures = d.book.figures()
    if steps is None:
        d._cap = NO_CAP
        d._broadcast(max_steps=NO_CAP)
        return
    d._cap = d.total_steps() + steps
    for index in d.book.live():
        d._broadcast([index], max_steps=figures[index].get("steps", 0) + steps)


def wait_until_paused(d, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d._monitor.poll(d)
        figures = d.book.figures()
        if all(figures[i].get("state") != "running" for i in d.book.live()):
            return
        time.sleep(0.02)


def fit_loop(d, steps: int | None, seconds: float | None, progress: bool) -> list[dict]:
    """Resume the replicas, wait for the budget, pause them, record a final evaluation."""
    with d._launching:
        _set_caps(d, steps)
        d._broadcast(paused=False)
    target = d.total_steps() + steps if steps else None
    start = time.perf_counter()
    d.book.clock_start()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=steps or seconds, unit="step" if steps else "s", desc="downpour", leave=False)
    done = 0.0
    try:
        while True:
            time.sleep(0.05)  # the monitor thread keeps the figures fresh
            total = d.total_steps()
            elapsed = time.perf_counter() - start
            if bar is not None:
                now = (total - (target - steps)) if steps else min(elapsed, seconds)
                bar.update(now - done)
                done = now
                if d.history:
                    h = d.history[-1]
                    bar.set_postfix(replicas=d.book.live_count(), loss=f"{h['train_loss']:.3f}",
                                    acc=f"{h['test_accuracy']:.3f}", refresh=False)
            if (target is not None and total >= target) or (seconds is not None and elapsed >= seconds):
                break
            if d.book.live_count() == 0:
                raise RuntimeError("every replica has failed: " + "; ".join(
                    str(f.get("error")) for f in d.book.figures().values()))
    finally:
        with d._launching:
            d._broadcast(paused=True)
        wait_until_paused(d)
        d.book.clock_stop()
        if bar is not None:
            bar.close()
    d.record_eval()
    return d.history
