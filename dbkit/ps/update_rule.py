"""What a shard update rule is, and the registry that makes one usable by name (the extension point).

A rule is a frozen dataclass with a registered ``name``, a learning rate
``lr`` and its own knobs (each a field, each described by a ``Setting`` in
``knobs`` so that every value is range-checked the way the run's own
settings are). It keeps at most one float per parameter (``state``:
Adagrad's accumulator, a momentum) and changes the parameters in place::

    @register_rule
    @dataclass(frozen=True)
    class Momentum(UpdateRule):
        name: ClassVar[str] = "momentum"
        knobs: ClassVar[tuple[Setting, ...]] = (Setting("beta", "float", 0.0, 1.0, help="momentum"),)
        keeps_state: ClassVar[bool] = True
        beta: float = 0.9

        def apply(self, params, grad, state, staleness):
            state *= self.beta
            state += grad
            params -= self.lr * state

Registering one adds its name to the ``optimizer`` setting's choices and its
knobs to the settings table: the API (``optimizer="momentum", beta=0.5``), the
CLI (``--optimizer momentum --beta 0.5``), the panel and the simulator then
know it. ``docs/extending.md`` walks through writing one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..named_classes import NamedClasses
from ..settings import Setting, check, knobs_of


@dataclass(frozen=True)
class UpdateRule:
    """A shard's update rule: ``apply`` a pushed gradient to ``params`` in place.

    Subclasses set ``name`` and, if they have any, ``knobs`` (one ``Setting`` per
    extra field) and ``keeps_state`` (one float32 per parameter, made by
    ``new_state``). ``staleness`` is how many updates the shard applied since the
    pushing replica fetched (DistBelief Sec. 4.1's asynchrony, counted exactly).
    """

    name: ClassVar[str] = ""
    knobs: ClassVar[tuple[Setting, ...]] = ()
    keeps_state: ClassVar[bool] = False
    #: the state must stay non-negative (a sum of squares): a checkpoint that breaks this is refused
    state_nonnegative: ClassVar[bool] = False
    initial_state: ClassVar[float] = 0.0
    lr: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", check("lr", self.lr))
        for knob in {**{k.name: k for k in knobs_of(type(self))}, **{k.name: k for k in self.knobs}}.values():
            object.__setattr__(self, knob.name, knob.check(getattr(self, knob.name)))

    @property
    def optimizer(self) -> str:
        """The rule's registered name (a run's ``optimizer`` setting)."""
        return self.name

    def settings(self) -> dict[str, Any]:
        """The knobs' values, by name (what a report records beside the rule's name)."""
        return {k.name: getattr(self, k.name) for k in self.knobs}

    def but(self, **changes: Any) -> UpdateRule:
        """A copy with ``changes`` (checked)."""
        return dataclasses.replace(self, **changes)

    def new_state(self, size: int) -> np.ndarray | None:
        """Fresh state for ``size`` parameters: ``initial_state`` each if the rule keeps state, else None."""
        return np.full(size, self.initial_state, dtype=np.float32) if self.keeps_state else None

    def check_state(self, state: np.ndarray) -> str | None:
        """Why ``state`` (from a checkpoint) cannot be this rule's, or None."""
        if self.state_nonnegative and not (np.isfinite(state).all() and (state >= 0).all()):
            return f"{self.name}'s accumulators must be finite and non-negative (sums of squares)"
        if not np.isfinite(state).all():
            return f"{self.name}'s state is not all finite"
        return None

    def apply(self, params: np.ndarray, grad: np.ndarray, state: np.ndarray | None,
              staleness: int = 0) -> np.ndarray | None:
        """Update ``params`` (and ``state``) in place with one pushed gradient (float32 arrays); a rule of
        one's own may instead return the new parameters."""
        raise NotImplementedError(f"{type(self).__name__} must define apply(params, grad, state, staleness)")

    def scale(self, grad: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``lr * grad`` into ``out``; the shard checks it is finite before it applies anything."""
        return np.multiply(grad, np.float32(self.lr), out=out)

    def apply_scaled(self, params: np.ndarray, grad: np.ndarray, scaled: np.ndarray, state: np.ndarray | None,
                     spare: np.ndarray, staleness: int = 0) -> np.ndarray | None:
        """``apply`` once ``scaled = scale(grad)`` is known (scratch it may overwrite, as ``spare``): the
        shard's hot path. A rule may override it to reuse ``scaled``; by default it calls ``apply`` and passes
        on what it returns (a rule of one's own may return the new parameters: ``dbkit.ps.rule_guard``)."""
        return self.apply(params, grad, state, staleness)


RULES = NamedClasses("optimizer", "update rule", "momentum")


def register_rule(cls: type[UpdateRule]) -> type[UpdateRule]:
    """Make ``cls`` usable by its ``name`` everywhere a run names its optimizer (a class decorator).

    Refused with a clear message: no name, a name taken by another class, a knob
    that is not a field, a knob whose name a setting of another meaning holds, no ``apply``.
    """
    if not (isinstance(cls, type) and issubclass(cls, UpdateRule)) or not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_rule takes a dataclass subclass of UpdateRule, got {cls!r}")
    if "knobs" not in cls.__dict__:  # declared once, as ``knob(...)`` fields
        cls.knobs = knobs_of(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    for knob in cls.knobs:
        if knob.name not in fields:
            raise ValueError(f"{cls.__name__}: knob {knob.name!r} is not a field of the rule")
        if knob.name == "lr":
            raise ValueError(f"{cls.__name__}: lr is every rule's own; it is not a knob")
    if cls.apply is UpdateRule.apply and cls.apply_scaled is UpdateRule.apply_scaled:
        raise ValueError(f"{cls.__name__} must define apply(params, grad, state, staleness)")
    RULES.add(cls)
    return cls


def rule_class(name: str) -> type[UpdateRule]:
    """The registered rule called ``name``, or ``ValueError`` listing those registered."""
    return RULES.get(name)


def registered_rules() -> tuple[str, ...]:
    """The names of every registered rule, in the order they were registered."""
    return RULES.names()



def make_rule(optimizer: str | UpdateRule, lr: float | None = None, **knobs: Any) -> UpdateRule:
    """A rule from its name (or a rule, copied) with ``lr`` and knobs; knobs it does not have are refused."""
    if isinstance(optimizer, UpdateRule):
        return optimizer.but(**({} if lr is None else {"lr": lr}), **knobs)
    cls = rule_class(optimizer)
    own = {k.name for k in cls.knobs}
    stray = sorted(set(knobs) - own)
    if stray:
        raise ValueError(f"optimizer {optimizer!r} has no setting {', '.join(stray)}"
                         + (f" (its settings: {', '.join(sorted(own))})" if own else " (it has none but lr)"))
    return cls(**({} if lr is None else {"lr": lr}), **knobs)


def describe_rules() -> str:
    """One line per registered rule: its name, the first line of its docstring and its knobs (``--help``)."""
    return RULES.describe()


def finite_norm(values: np.ndarray) -> bool:
    """True unless ``values`` holds NaN or inf or its squared norm overflows float32: one BLAS dot
    instead of an elementwise scan (NaN and inf propagate into it)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.dot(values, values)))
