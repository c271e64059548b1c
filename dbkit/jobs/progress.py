"""The progress bar of ``Job.fit``: steps or seconds done, with the latest loss and accuracy."""

from __future__ import annotations

from typing import Any


class Progress:
    """A tqdm bar (a widget in notebooks) following ``job.snapshot()``."""

    def __init__(self, job: Any, steps: int | None, seconds: float | None) -> None:
        from tqdm.auto import tqdm

        self.job, self.steps, self.seconds = job, steps, seconds
        self.first = job.snapshot().step
        self.done = 0.0
        self.bar = tqdm(total=steps or seconds, unit="step" if steps else "s", desc=job.algorithm, leave=False)

    def update(self, elapsed: float) -> None:
        snap = self.job.snapshot()
        now = float(min(snap.step - self.first, self.steps)) if self.steps else min(elapsed, self.seconds or 0.0)
        if now > self.done:
            self.bar.update(now - self.done)
            self.done = now
        if snap.evaluation is not None:
            self.bar.set_postfix(replicas=snap.live_replicas, loss=f"{snap.evaluation.train_loss:.3f}",
                                 acc=f"{snap.evaluation.test_accuracy:.3f}", refresh=False)

    def close(self) -> None:
        self.bar.close()
