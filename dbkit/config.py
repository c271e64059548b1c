"""Run settings as one frozen dataclass; the CLI maps its flags onto these fields.

Names follow the paper: replicas, shards, partitions, n_fetch, n_push,
warm start. Every field is checked when the config is made, and a bad value
raises ``ValueError`` naming the setting and its allowed range.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

ALGORITHMS = ("sgd", "downpour", "sandblaster")
MODELS = ("linear", "mlp", "speech", "image-local")


def _int_range(name: str, value, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        allowed = f"[{lo}, {hi}]" if hi is not None else f"[{lo}, inf)"
        raise ValueError(f"{name} must be a whole number in {allowed}, got {value!r}")


def _float_range(name: str, value, lo: float, hi: float, lo_open: bool = True) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > lo if lo_open else value >= lo) and value <= hi
    if not ok:
        raise ValueError(f"{name} must be a finite number in {'(' if lo_open else '['}{lo}, {hi}], got {value!r}")


@dataclass(frozen=True)
class RunConfig:
    """Every setting of one training run.

    Attributes mirror the CLI flags (``--n-fetch`` is ``n_fetch``). ``steps``
    and ``seconds`` bound the run; if neither is given, ``steps`` is used.
    """

    algorithm: str = "sgd"
    dataset: str = "digits"
    model: str = "mlp"
    hidden: tuple[int, ...] | None = None
    l2: float = 1e-4
    batch_size: int = 32
    lr: float = 0.05
    optimizer: str = "sgd"
    steps: int | None = 2000
    seconds: float | None = None
    seed: int = 0
    eval_every: int = 100
    replicas: int = 1
    shards: int = 1
    partitions: int = 1
    n_fetch: int = 1
    n_push: int = 1
    warm_start_steps: int = 0
    workers: int = 2
    scheduler: str | None = None
    memory: int = 10
    iterations: int = 100
    work_unit_size: int = 0
    backup: bool = True
    balance: bool = True
    slow_replicas: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.optimizer not in ("sgd", "adagrad"):
            raise ValueError(f"optimizer must be 'sgd' or 'adagrad', got {self.optimizer!r}")
        if self.hidden is not None:
            object.__setattr__(self, "hidden", tuple(self.hidden))
            if not self.hidden or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in self.hidden):
                raise ValueError(f"hidden must be widths >= 1 such as 256,256, got {self.hidden!r}")
        _float_range("l2", self.l2, 0.0, 10.0, lo_open=False)
        _float_range("lr", self.lr, 0.0, 100.0)
        _int_range("batch_size", self.batch_size, 1, 1_000_000)
        _int_range("seed", self.seed, 0, 2**32 - 1)
        _int_range("eval_every", self.eval_every, 1)
        if self.steps is None and self.seconds is None:
            raise ValueError("give steps or seconds (how long to train)")
        if self.steps is not None:
            _int_range("steps", self.steps, 1)
        if self.seconds is not None:
            _float_range("seconds", self.seconds, 0.0, 7 * 24 * 3600.0)
        _int_range("replicas", self.replicas, 1, 256)
        _int_range("shards", self.shards, 1, 256)
        _int_range("partitions", self.partitions, 1, 64)
        if self.partitions > 1 and self.algorithm != "downpour":
            raise ValueError(f"partitions > 1 (model partitioning) runs inside downpour only; {self.algorithm} "
                             f"replicas are whole networks, got partitions={self.partitions}")
        if self.shards < self.partitions:  # as dbkit.partition.aligned_layout, but before anything starts
            raise ValueError(f"shards must be at least partitions ({self.partitions}) so that every shard holds one "
                             f"partition's parameters, got shards={self.shards}")
        _int_range("n_fetch", self.n_fetch, 1, 100_000)
        _int_range("n_push", self.n_push, 1, 100_000)
        _int_range("warm_start_steps", self.warm_start_steps, 0)
        _int_range("workers", self.workers, 1, 256)
        _int_range("memory", self.memory, 1, 1000)
        _int_range("iterations", self.iterations, 1)
        _int_range("work_unit_size", self.work_unit_size, 0)
        slow = tuple((int(i), float(f)) for i, f in (dict(self.slow_replicas).items()))
        object.__setattr__(self, "slow_replicas", slow)
        for i, f in slow:
            if not 0 <= i < self.replicas or not (math.isfinite(f) and 1.0 <= f <= 1000.0):
                raise ValueError(f"slow_replicas needs replica indices in [0, {self.replicas - 1}] and factors in "
                                 f"[1, 1000], got {i}:{f}")
        if self.scheduler is not None and not isinstance(self.scheduler, str):
            raise ValueError(f"scheduler must be an address such as tcp://127.0.0.1:8786, got {self.scheduler!r}")

    def replace(self, **changes) -> "RunConfig":
        """A copy with ``changes`` applied (validated)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}")
        return replace(self, **changes)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["hidden"] = list(self.hidden) if self.hidden else None
        d["slow_replicas"] = {str(i): f for i, f in self.slow_replicas}
        return d
