"""One parameter shard: a server owning a contiguous slice of the parameters.

DistBelief Sec. 4.1: "the parameter server ... is sharded across many
machines"; each shard "operates independently of the others". A push is
applied at once, with no barrier and no global lock. Its *staleness* is how
many updates this shard applied since the pushing replica fetched; its *age*
is how many examples' gradients this shard applied since the replica fetched
the parameters its oldest gradient in the push was computed from, plus the
push's own examples (it grows with ``n_fetch`` and ``n_push``).

This is a plain class: tested in-process, and run on Dask as an actor by
the Dask runtime unchanged. All methods are short, as Dask actor methods on
one worker share one thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import numpy as np

from .checkpoint import ShardState, write_shard
from .records import Histogram, PushAnswer, ShardFigures, coarse
from .rule_guard import GuardedUpdate, trusted
from .rules import check_lr
from .update_rule import UpdateRule, finite_norm, make_rule
from .vector_checkpoint import VectorState, write_vectors
from .vectors import NamedVectors

AGE_WINDOW = 4096  # versions back for which a shard remembers how many examples it had applied


#: what a shard's named vectors answer as they are (``NamedVectors``); pushes into them are ``accumulate``
VECTOR_COMMANDS = frozenset({"dot", "axpy", "scale", "copy", "zero", "drop", "names", "landed_units"})


class ParameterShard:
    """Holds ``params[start:stop]`` and applies pushed gradients.

    Parameters
    ----------
    index : int
        Shard number in the layout.
    start, stop : int
        The range of the flat vector this shard owns.
    initial : ndarray
        Initial values, length ``stop - start`` (copied, stored as float32).
    optimizer : str or UpdateRule
        A registered rule's name (``'sgd'``, ``'adagrad'``, ...) or a rule with its knobs
        (``dbkit.ps.update_rule``).
    lr : float
        Learning rate in (0, 100].
    """

    def __init__(self, index: int, start: int, stop: int, initial: np.ndarray,
                 optimizer: str | UpdateRule = "sgd", lr: float = 0.1) -> None:
        initial = np.asarray(initial)
        if initial.shape != (stop - start,):
            raise ValueError(f"shard {index}: initial values have shape {initial.shape}, expected ({stop - start},)")
        if not np.isfinite(initial).all():
            raise ValueError(f"shard {index}: initial values are not all finite")
        self.index, self.start, self.stop = int(index), int(start), int(stop)
        self.rule = make_rule(optimizer, lr)
        self.params = np.array(initial, dtype=np.float32, copy=True)
        self.opt_state = self.rule.new_state(self.size)
        # the update rule's intermediate terms, and where an unaligned gradient lands (``_aligned``)
        self._scratch = (np.empty(self.size, dtype=np.float32), np.empty(self.size, dtype=np.float32))
        self._landing = np.empty(self.size, dtype=np.float32)
        self._guard: GuardedUpdate | None = None  # a rule of one's own's checks (``rule_guard``), made at need
        self.version = 0
        self.examples = 0  # examples whose gradients this shard applied
        self._examples_at = np.zeros(AGE_WINDOW, dtype=np.int64)  # ring: examples applied at each version
        self.fetches = 0
        self.rejected = 0
        self.rejections: Counter[str] = Counter()
        self.staleness: Counter[int] = Counter()
        self.ages: Counter[int] = Counter()  # coarse ages in examples (``histogram.coarse``)
        self.pushers: Counter[str] = Counter()
        self.bytes_fetched = 0
        self.bytes_pushed = 0
        #: Sandblaster's named vectors (``dbkit.ps.vectors``), written under this shard's lock
        self.named = NamedVectors(self.index, self.params, self._advance)
        # lock order: leaf (parameters, accumulators, version and counters; a fetch or push holds it alone)
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.stop - self.start

    def ping(self) -> int:
        """This shard's version, without taking its lock: the driver's heartbeat (a hung machine answers
        nothing, a busy shard still answers at once)."""
        return self.version

    def fetch(self, into: np.ndarray | None = None) -> tuple[int, np.ndarray]:
        """Return ``(version, copy of the parameters)``; never an alias. With ``into`` (this shard's size,
        float32) the parameters are written there and ``into`` is returned: an end that owns its client's
        array (a ``ThreadedShard``, the simulator's ``ShardEnd``) makes no copy of its own."""
        if into is None:
            into = np.empty(self.size, dtype=np.float32)
        return self.fetch_into(into), into

    def fetch_into(self, out: np.ndarray) -> int:
        """``fetch`` into ``out`` (this shard's size, float32) instead of a new array; returns the version."""
        if out.shape != (self.size,):
            raise ValueError(f"fetch_into: out has shape {out.shape}, shard {self.index} holds {self.size}")
        with self._lock:
            self.fetches += 1
            self.bytes_fetched += self.params.nbytes
            np.copyto(out, self.params)
            return self.version

    def push(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
             first_version: int | None = None) -> PushAnswer:
        """Apply one gradient slice computed from parameters at ``fetched_version``.

        ``pusher`` optionally names who pushed (a replica, or a replica's
        partition); accepted pushes are counted per name in ``figures()``.
        ``examples`` is how many examples' gradients the push sums, and
        ``first_version`` the version fetched before its oldest gradient
        (default ``fetched_version``): they give the push's age in examples.

        A gradient of the wrong length, with NaN or inf (or whose step
        ``lr * grad`` overflows float32), or claiming a version this shard has
        not reached is refused: counted in ``rejected``, and the parameters
        stay bit-identical.
        """
        grad = np.asarray(grad)
        first = fetched_version if first_version is None else first_version
        with self._lock:
            reason = (self._form_refusal(grad) or self._version_refusal(fetched_version)
                      or self._version_refusal(first, "first version"))
            if reason is None and not (isinstance(examples, (int, np.integer)) and examples >= 0):
                reason = f"bad examples: {examples!r}"
            if reason is None:
                # The step is computed first, into aligned scratch, and checked there: a gradient off
                # the network may start at any byte, and a BLAS dot over it would copy it slowly.
                step = self.rule.scale(grad, self._scratch[0])
                if not finite_norm(step):
                    reason = "non-finite: gradient has NaN or inf (or its step lr * grad overflows float32)"
            if reason is not None:
                return self._refuse(reason)
            staleness = self.version - int(fetched_version)
            age = self._examples_since(int(first)) + int(examples)
            if trusted(self.rule):
                self.rule.apply_scaled(self.params, grad, step, self.opt_state, self._scratch[1], staleness)
            else:  # a rule of one's own: its output checked, and refused with everything as it was
                if self._guard is None:
                    self._guard = GuardedUpdate(self.size)
                self._guard.apply(self.rule, self.params, grad, step, self.opt_state, self._scratch[1], staleness)
            self._advance(int(examples))
            self.staleness[staleness] += 1
            self.ages[coarse(age)] += 1
            if pusher is not None:
                self.pushers[str(pusher)] += 1
            self.bytes_pushed += grad.size * 4
            return PushAnswer(True, self.version, staleness, age)

    def _aligned(self, values) -> np.ndarray:
        """``values`` as an array numpy can compute on at full speed.

        A gradient that arrived over the network is a frame cut out of a larger
        message, so it may start at any byte; numpy then copies it slowly for
        BLAS (measured here: the finiteness check of 4M float32 5.1 ms unaligned,
        0.55 ms aligned). An unaligned one is copied once into a buffer of this
        shard's (1.1 ms).
        """
        values = np.asarray(values)
        if not values.flags.aligned and values.dtype == np.float32 and values.shape == (self.size,):
            np.copyto(self._landing, values)
            return self._landing
        return values

    def _advance(self, examples: int = 0) -> None:
        """One more update of the parameters, summing ``examples`` examples' gradients."""
        self.version += 1
        self.examples += examples
        self._examples_at[self.version % AGE_WINDOW] = self.examples

    def _examples_since(self, version: int) -> int:
        """Examples applied since this shard was at ``version`` (at most ``AGE_WINDOW`` versions back)."""
        version = max(version, self.version - AGE_WINDOW + 1, 0)
        return self.examples - int(self._examples_at[version % AGE_WINDOW])

    def push_fetch(self, grad: np.ndarray, fetched_version: int, pusher: str | None = None, examples: int = 0,
                   first_version: int | None = None, into: np.ndarray | None = None
                   ) -> tuple[PushAnswer, int, np.ndarray]:
        """``push`` then ``fetch`` in one call: ``(answer, version, copy of the parameters)``.

        A Downpour replica whose push is due just before its next fetch sends
        one message per shard instead of two; the result is the same as
        calling the two in turn (``into`` as ``fetch`` takes it).
        """
        answer = self.push(grad, fetched_version, pusher, examples, first_version)
        version, params = self.fetch(into)
        return answer, version, params

    # ---- Sandblaster's named vectors (DistBelief Sec. 4.2): each command under the shard's lock ----------
    def vectors(self, command: str, *args: Any) -> Any:
        """Run ``command`` (one of ``VECTOR_COMMANDS``: ``dot``, ``axpy``, ``scale``, ``copy``, ``zero``,
        ``drop``, ``names``, ``landed_units``) on this shard's named vectors (``NamedVectors``); its answer."""
        if command not in VECTOR_COMMANDS:
            raise ValueError(f"no vector command {command!r} (one of {', '.join(sorted(VECTOR_COMMANDS))})")
        with self._lock:
            return getattr(self.named, command)(*args)

    def accumulate(self, name: str, values: np.ndarray, units: tuple = ()) -> PushAnswer:
        """``name += values`` (a replica's summed gradient slice); refused like a bad push, and refused when
        ``units`` (the work units summed in ``values``) holds one that already landed here, so a unit redone
        after its replica died mid-push is never counted twice on this shard."""
        with self._lock:
            values = self._aligned(values)
            twice = self.named.twice(name, units)
            if twice:
                return PushAnswer(False, self.version, reason=f"duplicate: units {twice} already landed")
            reason = self._refusal(values, 0)
            if reason is not None:
                return self._refuse(reason)
            self.named.add(name, values, units)
            self.bytes_pushed += values.size * 4
            return PushAnswer(True, self.version)

    def fetch_vector(self, name: str) -> tuple[int, np.ndarray]:
        """``(version, copy of vector name)``; ``fetch()`` is ``fetch_vector("params")``."""
        with self._lock:
            values = self.named.get(name)
            self.fetches += 1
            self.bytes_fetched += values.nbytes
            return self.version, values.copy()

    def _form_refusal(self, grad: np.ndarray) -> str | None:
        if grad.shape != (self.size,):
            return f"wrong length: got shape {grad.shape}, shard {self.index} holds {self.size}"
        if grad.dtype == np.float32:  # what every replica sends: no need to ask numpy's type tree
            return None
        if not np.issubdtype(grad.dtype, np.number) or np.issubdtype(grad.dtype, np.complexfloating):
            return f"not numeric: dtype {grad.dtype}"
        return None

    def _refusal(self, grad: np.ndarray, fetched_version) -> str | None:
        """Why ``grad`` (pushed from ``fetched_version``) must be refused, or None: its form, its
        finiteness, its version."""
        reason = self._form_refusal(grad)
        if reason is None and not finite_norm(grad.astype(np.float32, copy=False)):
            reason = "non-finite: gradient has NaN or inf (or overflows float32)"
        return reason or self._version_refusal(fetched_version)

    def _refuse(self, reason: str) -> PushAnswer:
        self.rejected += 1
        self.rejections[reason.split(":")[0]] += 1
        return PushAnswer(False, self.version, reason=reason)

    def _version_refusal(self, version, what: str = "version") -> str | None:
        if isinstance(version, bool) or not isinstance(version, (int, np.integer)) or not 0 <= version <= self.version:
            return f"bad version: {what} {version!r} not in [0, {self.version}]"
        return None

    def set_lr(self, lr: float) -> float:
        """Change the learning rate for the next pushes; returns it."""
        lr = check_lr(lr)
        with self._lock:
            self.rule = self.rule.but(lr=lr)
        return lr

    def set_optimizer(self, optimizer: str | UpdateRule) -> str:
        """Change the update rule for the next pushes (a name, or a rule with its knobs: its ``lr`` is
        ignored, the shard keeps its own); returns its name. A rule of another name starts from fresh
        state (Adagrad's accumulators at ``initial_accumulator``); one of the same name keeps it."""
        rule = make_rule(optimizer, self.rule.lr)
        with self._lock:
            if rule.name != self.rule.name:
                self.opt_state = rule.new_state(self.size)
            self.rule = rule
        return rule.name

    def figures(self) -> ShardFigures:
        """Counters for reports: updates, refusals, staleness and age of pushes, bytes."""
        with self._lock:
            return ShardFigures(
                index=self.index, start=self.start, stop=self.stop, version=self.version, fetches=self.fetches,
                rejected=self.rejected, optimizer=self.rule.name, lr=self.rule.lr,
                bytes_fetched=self.bytes_fetched, bytes_pushed=self.bytes_pushed, examples=self.examples,
                staleness=Histogram.of(self.staleness), age=Histogram.of(self.ages),
                rejections=dict(self.rejections), pushers=dict(self.pushers), rule_settings=self.rule.settings())

    def save(self, directory: str, model: str) -> int:
        """Write this shard's checkpoint (``dbkit.ps.checkpoint``) into ``directory``; returns its version.

        The arrays are copied under the lock (``state``) and written outside it,
        so pushes wait only for the copy. ``model`` is the network's fingerprint.
        """
        state = ShardState(**self.state(), model=model, saved_at=time.time())
        write_shard(directory, state)
        return state.version

    def save_vectors(self, directory: str, names: list[str], model: str, iteration: int) -> str:
        """Write vectors ``names`` (Sandblaster's parameters, gradient, history) to this shard's
        checkpoint of ``iteration`` (``dbkit.ps.vector_checkpoint``); copied under the lock."""
        with self._lock:
            vectors = {name: self.named.get(name).copy() for name in names}
        state = VectorState(self.index, self.start, self.stop, iteration, model, vectors)
        return str(write_vectors(directory, state))

    def load_vectors(self, vectors: dict[str, np.ndarray]) -> None:
        """Set named vectors (all checked first: length and finite values), e.g. from a checkpoint."""
        checked = {k: np.array(v, dtype=np.float32, copy=True) for k, v in vectors.items()}
        if any(v.shape != (self.size,) or not np.isfinite(v).all() for v in checked.values()):
            raise ValueError(f"shard {self.index}: vectors must be finite and of length {self.size}")
        with self._lock:
            for name, v in checked.items():
                self.named.out(name)[:] = v

    def state(self) -> dict:
        """A checkpoint: copies of parameters and optimizer state, version, examples applied and rule."""
        with self._lock:
            return {
                "index": self.index, "start": self.start, "stop": self.stop, "version": self.version,
                "examples": self.examples, "params": self.params.copy(),
                "opt_state": None if self.opt_state is None else self.opt_state.copy(),
                "optimizer": self.rule.name, "lr": self.rule.lr, "rule_settings": self.rule.settings(),
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
            knobs = dict(state.get("rule_settings") or {})
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"shard {self.index}: malformed checkpoint ({e!r})") from e
        if (state.get("start"), state.get("stop")) != (self.start, self.stop):
            raise ValueError(f"shard {self.index}: checkpoint covers [{state.get('start')}, {state.get('stop')}), "
                             f"this shard holds [{self.start}, {self.stop})")
        if params.shape != (self.size,) or not np.isfinite(params).all() or version < 0:
            raise ValueError(f"shard {self.index}: checkpoint parameters are the wrong length or not finite")
        try:
            if not knobs and optimizer == self.rule.name:
                knobs = self.rule.settings()  # a checkpoint of before rules had settings: this shard's own
            rule = make_rule(optimizer, lr, **knobs)
        except ValueError as e:
            raise ValueError(f"shard {self.index}: checkpoint's rule: {e}") from e
        if rule.keeps_state != (opt is not None) or (opt is not None and np.shape(opt) != (self.size,)):
            raise ValueError(f"shard {self.index}: checkpoint optimizer state does not match optimizer {optimizer!r}")
        with self._lock:
            np.copyto(self.params, params)  # (in place: the named vectors hold this array as "params")
            self.opt_state = None if opt is None else np.array(opt, dtype=np.float32, copy=True)
            self.version, self.rule = version, rule
            self._examples_at[:] = self.examples
        return version

