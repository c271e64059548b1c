"""Run settings as frozen dataclasses; the CLI maps its flags onto these fields.

Names follow the paper: replicas, shards, partitions, n_fetch, n_push, warm
start. Settings every algorithm shares sit on ``RunConfig`` itself; each
algorithm's own settings sit in its section (``config.downpour.n_push``,
``config.sandblaster.memory``, ``config.sgd.on_cluster``). Every value is
checked against ``dbkit.settings.SETTINGS`` when a config is made, and a bad
value raises ``ValueError`` naming the setting and its allowed range.

``RunConfig.make(**flat)`` and ``config.replace(**flat)`` take flat names and
put each in its section: ``RunConfig.make(algorithm="downpour", n_push=4)``.

A registered update rule's or replica loop's own settings (its *knobs*,
``dbkit.ps.update_rule`` and ``dbkit.downpour.replica_kinds``) sit in
``config.knobs``, by name, and are set the same way:
``RunConfig.make(optimizer="nesterov", momentum=0.5)``. A knob belongs to the
chosen ``optimizer`` or ``replica``; one of another is refused.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from .settings import ALGORITHMS, KNOBS, MODELS, SETTINGS, check

__all__ = ["ALGORITHMS", "MODELS", "DownpourConfig", "RunConfig", "SGDConfig", "SandblasterConfig"]


#: scheduler address schemes dbkit can use: another process cannot reach ``inproc://``, and ``ucx://``
#: needs UCX and distributed-ucxx on every machine, which dbkit does not install
SCHEDULER_SCHEMES = ("tcp", "tls")


def _check_scheduler(address: str) -> None:
    scheme, sep, _ = address.partition("://")
    if sep and scheme not in SCHEDULER_SCHEMES:
        raise ValueError(f"scheduler must be a Dask scheduler's tcp:// or tls:// address (or HOST:PORT), got "
                         f"{address!r}: {scheme}:// is not supported here")


def _check_fields(obj: object) -> None:
    """Check and normalise every field of a frozen dataclass against the settings table."""
    for f in fields(obj):  # type: ignore[arg-type]
        if f.name in SETTINGS:
            object.__setattr__(obj, f.name, check(f.name, getattr(obj, f.name)))


@dataclass(frozen=True)
class DownpourConfig:
    """Downpour SGD (paper Sec. 4.1) and model partitioning (Sec. 3)."""

    partitions: int = 1
    n_fetch: int = 1
    n_push: int = 1
    overlap: bool = True
    transport: str = "socket"
    replica: str = "downpour"
    warm_start_steps: int = 0
    max_nonfinite: int = 20

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True)
class SandblasterConfig:
    """Sandblaster L-BFGS (paper Sec. 4.2)."""

    memory: int = 10
    iterations: int = 100
    work_unit_size: int = 0
    backup: bool = True
    balance: bool = True
    gtol: float = 1e-5
    ftol: float = 1e-9
    push_every: int = 4

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True)
class SGDConfig:
    """The synchronous SGD baseline."""

    on_cluster: bool = False

    def __post_init__(self) -> None:
        _check_fields(self)


SECTIONS = {"downpour": DownpourConfig, "sandblaster": SandblasterConfig, "sgd": SGDConfig}


@dataclass(frozen=True)
class RunConfig:
    """Every setting of one training run.

    Attributes mirror the CLI flags (``--n-fetch`` is ``downpour.n_fetch``).
    ``steps`` and ``seconds`` bound the run; if neither is given, ``steps`` is used.
    """

    algorithm: str = "sgd"
    dataset: str = "digits"
    model: str = "mlp"
    hidden: tuple[int, ...] | None = None
    l2: float = 1e-4
    max_data_gib: float = 4.0
    batch_size: int = 32
    lr: float = 0.05
    optimizer: str = "sgd"
    steps: int | None = 2000
    seconds: float | None = None
    seed: int = 0
    eval_every: int = 100
    target_accuracy: float | None = None
    replicas: int = 1
    shards: int = 1
    workers: int = 2
    runtime: str = "dask"
    scheduler: str | None = None
    slow_replicas: tuple[tuple[int, float], ...] = ()
    checkpoint_dir: str | None = None
    checkpoint_every: float = 10.0
    restart_replicas: bool = True
    heartbeat_timeout: float = 10.0
    downpour: DownpourConfig = field(default_factory=DownpourConfig)
    sandblaster: SandblasterConfig = field(default_factory=SandblasterConfig)
    sgd: SGDConfig = field(default_factory=SGDConfig)
    knobs: tuple[tuple[str, Any], ...] = ()  # the rule's and replica loop's own settings, set ones only

    def __post_init__(self) -> None:
        _check_fields(self)
        self._check_knobs()
        if self.checkpoint_dir is not None:  # the driver's folder, wherever a worker's working folder is
            object.__setattr__(self, "checkpoint_dir", os.path.abspath(os.path.expanduser(self.checkpoint_dir)))
        if self.scheduler is not None:
            _check_scheduler(self.scheduler)
            if self.runtime != "dask":
                raise ValueError(f"scheduler is a Dask scheduler's address; runtime={self.runtime!r} starts its "
                                 "own workers: give one or the other")
        if self.steps is None and self.seconds is None:
            raise ValueError("give steps or seconds (how long to train)")
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                raise ValueError(f"{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        d = self.downpour
        if d.partitions > 1 and self.algorithm != "downpour":
            raise ValueError(f"partitions > 1 (model partitioning) runs inside downpour only; {self.algorithm} "
                             f"replicas are whole networks, got partitions={d.partitions}")
        if self.shards < d.partitions:  # as dbkit.partition.aligned_layout, but before anything starts
            raise ValueError(f"shards must be at least partitions ({d.partitions}) so that every shard holds one "
                             f"partition's parameters, got shards={self.shards}")
        if self.checkpoint_dir is not None and self.algorithm == "sgd":
            raise ValueError("checkpoint_dir (checkpoints, and shards that come back from them) works with "
                             "downpour and sandblaster, not with the single-process sgd baseline")
        if self.algorithm == "sgd" and self.replicas != 1:
            raise ValueError(f"sgd is the single-replica baseline: replicas must be 1, got {self.replicas}")
        for i, f in self.slow_replicas:  # Downpour numbers replicas on as they come and go: its job checks
            if self.algorithm == "sandblaster" and i >= self.replicas:
                raise ValueError(f"slow_replicas needs replica indices in [0, {self.replicas - 1}] and factors in "
                                 f"[1, 1000], got {i}:{f}")

    def _check_knobs(self) -> None:
        """Knobs in normal form (sorted pairs, each value checked), each of the chosen rule or loop."""
        from .downpour.replica_kinds import replica_class
        from .ps.update_rule import make_rule, rule_class

        try:
            pairs = dict(self.knobs).items()
        except (TypeError, ValueError) as e:
            raise ValueError(f"knobs must be name-value pairs, got {self.knobs!r}") from e
        normal = []
        for name, value in sorted(pairs):
            setting = SETTINGS.get(name)
            if setting is None or setting.section != KNOBS:
                raise ValueError(f"unknown settings: [{name!r}]")
            normal.append((name, setting.check(value)))
        object.__setattr__(self, "knobs", tuple(normal))
        rule, loop = rule_class(self.optimizer), replica_class(self.downpour.replica)
        own = {k.name for k in rule.knobs} | {k.name for k in loop.knobs}
        stray = [n for n, _ in normal if n not in own]
        if stray:
            raise ValueError(f"{', '.join(stray)} is not a setting of optimizer {self.optimizer!r} or replica "
                             f"{self.downpour.replica!r} (their settings: {', '.join(sorted(own)) or 'none'})")
        if loop.optimizers is not None and self.optimizer not in loop.optimizers:
            raise ValueError(f"replica {self.downpour.replica!r} is meant for optimizer "
                             f"{' or '.join(map(repr, loop.optimizers))}, got optimizer={self.optimizer!r}")
        if self.downpour.replica != "downpour" and (self.algorithm != "downpour" or self.downpour.partitions > 1):
            raise ValueError(f"replica {self.downpour.replica!r} runs in downpour with whole replicas "
                             f"(partitions=1), got algorithm={self.algorithm!r}, partitions={self.downpour.partitions}")
        make_rule(self.optimizer, self.shard_lr(), **self.rule_settings())

    def knob(self, name: str) -> Any:
        """A knob's value: as set, else its rule's or loop's default."""
        from .downpour.replica_kinds import knob_defaults, replica_class
        from .ps.update_rule import rule_class

        given = dict(self.knobs)
        if name in given:
            return given[name]
        for cls in (rule_class(self.optimizer), replica_class(self.downpour.replica)):
            defaults = knob_defaults(cls)
            if name in defaults:
                return defaults[name]
        raise KeyError(name)

    def rule_settings(self) -> dict[str, Any]:
        """The chosen update rule's knobs that are set."""
        from .ps.update_rule import rule_class

        own = {k.name for k in rule_class(self.optimizer).knobs}
        return {k: v for k, v in self.knobs if k in own}

    def replica_settings(self) -> dict[str, Any]:
        """The chosen replica loop's knobs that are set (its constructor's keyword arguments)."""
        from .downpour.replica_kinds import replica_class

        own = {k.name for k in replica_class(self.downpour.replica).knobs}
        return {k: v for k, v in self.knobs if k in own}

    def shard_lr(self) -> float:
        """The rate the shards apply: ``lr``, or the knob the replica loop names (``shard_rate``)."""
        from .downpour.replica_kinds import replica_class

        rate = replica_class(self.downpour.replica).shard_rate if self.algorithm == "downpour" else None
        return self.lr if rate is None else float(self.knob(rate))

    def rule_text(self) -> str:
        """``adagrad lr=0.05``: the rule, the knobs set and, for a loop other than Downpour's, the loop."""
        own = self.rule_settings()
        text = " ".join([f"{self.optimizer} lr={self.shard_lr():g}", *(f"{k}={v}" for k, v in own.items())])
        if self.algorithm == "downpour" and self.downpour.replica != "downpour":
            own = self.replica_settings()
            text += f", replica {self.downpour.replica}" + (
                f" ({', '.join(f'{k}={v}' for k, v in own.items())})" if own else "") + f" lr={self.lr:g}"
        return text

    def rule(self):
        """The shards' update rule, with its knobs and rate (``dbkit.ps.UpdateRule``)."""
        from .ps.update_rule import make_rule

        return make_rule(self.optimizer, self.shard_lr(), **self.rule_settings())

    @classmethod
    def make(cls, **flat: Any) -> RunConfig:
        """A config from flat setting names (``n_push=4``), each put in its section."""
        return cls().replace(**flat)

    def replace(self, **flat: Any) -> RunConfig:
        """A copy with ``flat`` changes applied, each to its section (validated)."""
        own = {f.name for f in fields(self)}
        plain: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        unknown = []
        knobs: dict[str, Any] = {}
        for k, v in flat.items():
            section = SETTINGS[k].section if k in SETTINGS else None
            if section == KNOBS:
                knobs[k] = v
            elif k in own:
                plain[k] = v
            elif section is not None:
                sections.setdefault(section, {})[k] = v
            else:
                unknown.append(k)
        if unknown:
            raise ValueError(f"unknown settings: {sorted(unknown)}")
        for name, changes in sections.items():
            plain[name] = replace(plain.get(name, getattr(self, name)), **changes)
        if knobs or "knobs" in plain or "optimizer" in plain or "downpour" in plain:
            kept = dict(plain.get("knobs", self.knobs))
            if "knobs" not in plain:  # a new rule or loop keeps only the knobs that are still its own
                kept = {k: v for k, v in kept.items() if k in self._owned(plain)}
            plain["knobs"] = tuple(sorted({**kept, **knobs}.items()))
        return replace(self, **plain)

    def _owned(self, plain: dict[str, Any]) -> set[str]:
        """The knobs the rule and loop of ``plain`` (a replace's changes, over this config) have."""
        from .downpour.replica_kinds import replica_class
        from .ps.update_rule import rule_class

        loop = (plain.get("downpour") or self.downpour).replica
        try:
            classes: list[Any] = [rule_class(plain.get("optimizer", self.optimizer)), replica_class(loop)]
        except ValueError:
            return set()  # the new name is refused when the config is made
        return {k.name for c in classes for k in c.knobs}

    def get(self, name: str) -> Any:
        """A setting's value by its flat name (``config.get("n_push")``; a knob as set or its default)."""
        section = SETTINGS[name].section if name in SETTINGS else None
        if section == KNOBS:
            return self.knob(name)
        return getattr(getattr(self, section), name) if section else getattr(self, name)

    @staticmethod
    def flat_settings(saved: dict) -> dict[str, Any]:
        """The flat settings of a ``to_dict()`` (a report's or checkpoint's ``config``), for ``make``:
        the inverse of ``to_dict``, keeping only settings this dbkit knows."""
        flat = {k: v for k, v in saved.items() if k not in SECTIONS}
        algorithm = str(saved.get("algorithm", "sgd"))
        flat.update(saved.get(algorithm) or {})
        flat["hidden"] = tuple(flat["hidden"]) if flat.get("hidden") else None
        flat["slow_replicas"] = tuple((int(i), float(f)) for i, f in (flat.get("slow_replicas") or {}).items())
        flat["knobs"] = tuple(sorted((flat.get("knobs") or {}).items()))
        known = {f.name for f in fields(RunConfig)} | {f.name for cls in SECTIONS.values() for f in fields(cls)}
        return {k: v for k, v in flat.items() if k in known}

    def to_dict(self) -> dict:
        """Every setting, with the section of this run's algorithm only (a report's ``config``)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in SECTIONS}
        d["hidden"] = list(self.hidden) if self.hidden else None
        d["slow_replicas"] = {str(i): f for i, f in self.slow_replicas}
        d[self.algorithm] = asdict(getattr(self, self.algorithm))
        d["knobs"] = dict(self.knobs)
        rule = self.rule()
        d["rule"] = {"name": rule.name, "lr": rule.lr, "settings": rule.settings()}
        if self.algorithm == "downpour":
            from .downpour.replica_kinds import knob_defaults, replica_class

            loop = replica_class(self.downpour.replica)
            d["replica_loop"] = {"name": loop.name, "settings": {k: self.knob(k) for k in knob_defaults(loop)}}
        return d

