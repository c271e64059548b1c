"""One parameter shard: a server owning a contiguous slice of the parameters.

DistBelief Sec. 4.1: "the parameter server ... is sharded across many
machines"; each shard "operates independently of the others". A push is
applied at once, with no barrier and no global lock, and its *staleness* is
how many updates this shard applied since the pushing replica fetched.

This is a plain class: tested in-process, and run on Dask as an actor by
``dbkit.cluster`` unchanged. All methods are short, as Dask actor methods on
one worker share one thread.
"""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np

from .rules import UpdateRule, check_lr
from .vectors import VectorOps


class ParameterShard(VectorOps):
    """Holds ``params[start:stop]`` and applies pushed gradients.

    Parameters
    ----------
    index : int
        Shard number in the layout.
    start, stop : int
        The range of the flat vector this shard owns.
    initial : ndarray
        Initial values, length ``stop - start`` (copied, stored as float32).
    optimizer : {'sgd', 'adagrad'}
    lr : float
        Learning rate in (0, 100].
    """

    def __init__(self, index: int, start: int, stop: int, initial: np.ndarray,
                 optimizer: str = "sgd", lr: float = 0.1) -> None:
        initial = np.asarray(initial)
        if initial.shape != (stop - start,):
            raise ValueError(f"shard {index}: initial values have shape {initial.shape}, expected ({stop - start},)")
        if not np.isfinite(initial).all():
            raise ValueError(f"shard {index}: initial values are not all finite")
        self.index, self.start, self.stop = int(index), int(start), int(stop)
        self.rule = UpdateRule(optimizer, lr)
        self.params = np.array(initial, dtype=np.float32, copy=True)
        self.opt_state = self.rule.new_state(self.size)
        self.version = 0
        self.fetches = 0
        self.rejected = 0
        self.rejections: Counter[str] = Counter()
        self.staleness: Counter[int] = Counter()
        self.pushers: Counter[str] = Counter()
        self.bytes_fetched = 0
        self.bytes_pushed = 0
        self.vectors: dict[str, np.ndarray] = {}  # named vectors for Sandblaster (dbkit.ps.vectors)
        self.landed: dict[str, set] = {}  # work units accumulated into each named vector
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.stop - self.start

    def fetch(self) -> tuple[int, np.ndarray]:
        """Return ``(version, copy of the parameters)``; never an alias."""
        with self._lock:
            self.fetches += 1
            self.bytes_fetched += self.params.nbytes
            return self.version, self.params.copy()

    def push(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None) -> dict:
        """Apply one gradient slice computed from parameters at ``fetched_version``.

        ``pusher`` optionally names who pushed (a replica, or a replica's
        partition); accepted pushes are counted per name in ``stats()``.

        A gradient of the wrong length, with NaN or inf, or claiming a version
        this shard has not reached is refused: counted in ``rejected``, and
        the parameters stay bit-identical.

        Returns
        -------
        dict
            ``accepted`` (bool), ``version`` (after the push), ``staleness``
            (int, or None if refused) and ``reason`` (None, or why refused).
        """
        grad = np.asarray(grad)
        with self._lock:
            reason = self._refusal(grad, fetched_version)
            if reason is not None:
                self.rejected += 1
                self.rejections[reason.split(":")[0]] += 1
                return {"accepted": False, "version": self.version, "staleness": None, "reason": reason}
            staleness = self.version - int(fetched_version)
            self.rule.apply(self.params, grad.astype(np.float32, copy=False), self.opt_state)
            self.version += 1
            self.staleness[staleness] += 1
            if pusher is not None:
                self.pushers[str(pusher)] += 1
            self.bytes_pushed += grad.size * 4
            return {"accepted": True, "version": self.version, "staleness": staleness, "reason": None}

    def push_fetch(self, grad: np.ndarray, fetched_version: int,
                   pusher: str | None = None) -> tuple[dict, int, np.ndarray]:
        """``push`` then ``fetch`` in one call: ``(answer, version, copy of the parameters)``.

        A Downpour replica whose push is due just before its next fetch sends
        one message per shard instead of two; the result is the same as
        calling the two in turn.
        """
        answer = self.push(grad, fetched_version, pusher)
        version, params = self.fetch()
        return answer, version, params

    def _refusal(self, grad: np.ndarray, fetched_version) -> str | None:
        if grad.shape != (self.size,):
            return f"wrong length: got shape {grad.shape}, shard {self.index} holds {self.size}"
        if not np.issubdtype(grad.dtype, np.number) or np.issubdtype(grad.dtype, np.complexfloating):
            return f"not numeric: dtype {grad.dtype}"
        # One BLAS dot instead of an elementwise scan: NaN and inf propagate
        # into it, and so does an overflow (|g| ~ 1e19), which is refused too.
        g = grad.astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.isfinite(np.dot(g, g))
        if not finite:
            return "non-finite: gradient has NaN or inf (or overflows float32)"
        if not isinstance(fetched_version, (int, np.integer)) or not 0 <= fetched_version <= self.version:
            return f"bad version: {fetched_version!r} not in [0, {self.version}]"
        return None

    def set_lr(self, lr: float) -> float:
        """Change the learning rate for the next pushes; returns it."""
        lr = check_lr(lr)
        with self._lock:
            self.rule = UpdateRule(self.rule.optimizer, lr, self.rule.eps, self.rule.initial_accumulator)
        return lr

    def stats(self) -> dict:
        """Counters for reports: size, updates, rejected, staleness summary, bytes."""
        with self._lock:
            return {
                "index": self.index, "start": self.start, "stop": self.stop, "size": self.size,
                "version": self.version, "updates": self.version, "fetches": self.fetches,
                "rejected": self.rejected, "rejections": dict(self.rejections), "pushers": dict(self.pushers),
                "staleness": staleness_summary(self.staleness),
                "bytes_fetched": self.bytes_fetched, "bytes_pushed": self.bytes_pushed,
                "optimizer": self.rule.optimizer, "lr": self.rule.lr,
            }

    def state(self) -> dict:
        """A checkpoint: copies of parameters and optimizer state, version and rule."""
        with self._lock:
            return {
                "index": self.index, "start": self.start, "stop": self.stop, "version": self.version,
                "params": self.params.copy(),
                "opt_state": None if self.opt_state is None else self.opt_state.copy(),
                "optimizer": self.rule.optimizer, "lr": self.rule.lr,
            }

    def load_state(self, state: dict) -> int:
        """Restore a checkpoint made by ``state()`` of a shard with the same range.

        Validates everything before changing anything; returns the version.
        """
        try:
            params = np.asarray(state["params"], dtype=np.float32)
            opt = state.get("opt_state")
            version = int(state["version"])
            optimizer, lr = state["optimizer"], float(state["lr"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"shard {self.index}: malformed checkpoint ({e!r})") from e
        if (state.get("start"), state.get("stop")) != (self.start, self.stop):
            raise ValueError(f"shard {self.index}: checkpoint covers [{state.get('start')}, {state.get('stop')}), "
                             f"this shard holds [{self.start}, {self.stop})")
        if params.shape != (self.size,) or not np.isfinite(params).all() or version < 0:
            raise ValueError(f"shard {self.index}: checkpoint parameters are the wrong length or not finite")
        rule = UpdateRule(optimizer, lr, self.rule.eps, self.rule.initial_accumulator)
        if (rule.new_state(1) is None) != (opt is None) or (opt is not None and np.shape(opt) != (self.size,)):
            raise ValueError(f"shard {self.index}: checkpoint optimizer state does not match optimizer {optimizer!r}")
        with self._lock:
            self.params = params.copy()
            self.opt_state = None if opt is None else np.array(opt, dtype=np.float32, copy=True)
            self.version, self.rule = version, rule
        return version


def staleness_summary(counts: Counter) -> dict:
    """``{count, mean, p50, p95, max}`` of integer staleness values given as counts."""
    total = sum(counts.values())
    if not total:
        return {"count": 0, "mean": 0.0, "p50": 0, "p95": 0, "max": 0}
    keys = sorted(counts)
    cum = np.cumsum([counts[k] for k in keys])

    def q(p: float) -> int:
        return int(keys[int(np.searchsorted(cum, p * total))])

    return {
        "count": int(total),
        "mean": float(sum(k * v for k, v in counts.items()) / total),
        "p50": q(0.5), "p95": q(0.95), "max": int(keys[-1]),
    }
