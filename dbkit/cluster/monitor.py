"""The Downpour driver's monitor thread: polls replica figures, notices lost
workers, launches the waiting replicas after warm start, and records the history."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("dbkit")


class Monitor(threading.Thread):
    """Ticks every ``interval`` seconds until ``stop()``; never raises out of the thread."""

    def __init__(self, driver, interval: float = 0.05, min_eval_interval: float = 0.2) -> None:
        super().__init__(name="dbkit-downpour-monitor", daemon=True)
        self.driver = driver
        self.interval = interval
        self.min_eval_interval = min_eval_interval
        self._stop_event = threading.Event()
        self._next_eval = 0
        self._last_eval = 0.0
        self._next_partition_check = 0.0
        self.errors: list[str] = []

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=10)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - keep watching; remember what went wrong
                if not self._stop_event.is_set():
                    self.errors.append(f"{type(e).__name__}: {e}")
                    log.debug("monitor tick failed", exc_info=True)

    def tick(self) -> None:
        d = self.driver
        if d.stopped:
            return
        self.poll(d)
        self.warm_start(d)
        self.maybe_eval(d)

    def poll(self, d) -> None:
        """Take every worker's replica figures; a worker is lost only when its control
        actor is reported lost, or does not answer and the scheduler no longer lists it."""
        pending = []
        for worker, ctl in list(d._controls.items()):
            try:
                pending.append((worker, ctl.stats()))
            except RuntimeError as e:  # "Worker holding Actor was lost"
                self._lose_worker(d, worker, f"worker {worker} lost ({e})")
        for worker, p in pending:
            try:
                for index, figures in p.result(timeout=2).items():
                    d.book.update(int(index), figures)
            except Exception as e:  # noqa: BLE001
                if worker not in d.cluster.workers():  # asked only when a worker does not answer
                    self._lose_worker(d, worker, f"worker {worker} lost ({type(e).__name__})")
        d.book.settle_futures()
        self.check_partitions(d)
        self.release_ended_partitions(d)

    def check_partitions(self, d, every: float = 0.5) -> None:
        """A partitioned replica is lost as soon as a worker holding one of its partitions is
        gone from the scheduler (its own task could otherwise wait on the dead partition until
        the connection attempts time out)."""
        now = time.monotonic()
        if now < self._next_partition_check:
            return
        self._next_partition_check = now + every
        figures = d.book.figures()
        spread = {i: {p.get("worker") for p in figures[i].get("partitions") or ()} for i in d.book.live()}
        if not any(spread.values()):
            return
        alive = set(d.cluster.workers())
        for index, workers in spread.items():
            gone = sorted(w for w in workers if w and w not in alive)
            if gone:
                d.book.mark_lost(index, f"worker {gone[0]} holding a partition of replica {index} lost")

    @staticmethod
    def release_ended_partitions(d) -> None:
        """Drop the partition actors of replicas that ended on their own (lost, failed): their
        partners would otherwise keep their data and parameter blocks until the job stops."""
        for i in list(d._partition_names):
            if i in d.book.entries and d.book.state_of(i) in ("lost", "failed"):
                d._release_partitions([i], abort=f"replica {i} {d.book.state_of(i)}")

    @staticmethod
    def _lose_worker(d, worker: str, reason: str) -> None:
        for index in d.book.live():
            if d.book.worker_of(index) == worker:
                d.book.mark_lost(index, reason)
        d._controls.pop(worker, None)

    def warm_start(self, d) -> None:
        if not d.book.pending_warm:
            return
        first = d.book.figures().get(0, {})
        if first.get("steps", 0) >= d.config.warm_start_steps or d.book.state_of(0) not in ("running", "paused"):
            with d._launching:
                for index in list(d.book.pending_warm):
                    d._launch(index)

    def maybe_eval(self, d) -> None:
        total = d.total_steps()
        now = time.perf_counter()
        if total >= self._next_eval and now - self._last_eval >= self.min_eval_interval:
            d.record_eval()
            self._last_eval = now
            self._next_eval = total + d.config.eval_every
