"""The panel's controls: which settings each algorithm shows, and the core widget for each.

Every control names a setting of ``dbkit.settings.SETTINGS`` (its tooltip is
the setting's help, in the paper's words); sliders send their value when
released (``continuous_update=False``), and their readout takes a typed value.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import ipywidgets as w

from ..downpour.replica_kinds import knob_defaults, registered_replicas, replica_class
from ..ps.update_rule import registered_rules, rule_class
from ..settings import SETTINGS

STYLE = {"description_width": "120px"}
WIDE = w.Layout(width="340px")


@dataclass(frozen=True)
class Knob:
    """A control for ``setting``: an ``int`` or ``log`` slider over ``[lo, hi]``, a ``choice`` or a ``bool``."""

    setting: str
    label: str
    kind: str
    lo: float = 0
    hi: float = 0


REPLICAS = Knob("replicas", "replicas", "int", 1, 8)
REPLICA_LOOP = Knob("replica", "replica loop", "choice")
LR = Knob("lr", "learning rate", "log", 1e-3, 1.0)
OPTIMIZER = Knob("optimizer", "optimizer", "choice")

KNOBS: dict[str, tuple[Knob, ...]] = {
    "downpour": (REPLICAS, Knob("partitions", "partitions", "int", 1, 4), Knob("shards", "shards", "int", 1, 8),
                 Knob("n_fetch", "n_fetch", "int", 1, 32), Knob("n_push", "n_push", "int", 1, 32), LR, OPTIMIZER,
                 REPLICA_LOOP, Knob("warm_start_steps", "warm start steps", "int", 0, 1000)),
    "sandblaster": (REPLICAS, Knob("work_unit_size", "work-unit size", "int", 0, 500),
                    Knob("backup", "backup tasks", "bool"), Knob("balance", "load balancing", "bool")),
    "sgd": (LR, OPTIMIZER),
}

#: the buttons of each algorithm, in order
BUTTONS: dict[str, tuple[str, ...]] = {
    "downpour": ("start", "pause", "resume", "stop", "lose a replica"),
    "sandblaster": ("start", "stop"),
    "sgd": ("start", "pause", "resume", "stop"),
}

BUTTON_STYLE = {"start": "success", "pause": "", "resume": "", "stop": "danger", "lose a replica": "warning"}


def rule_and_loop_knobs(algorithm: str) -> tuple[tuple[Knob, Any], ...]:
    """A control, with its default, for each knob of every registered update rule and, in Downpour, every
    replica loop: the panel shows those of the job's rule and loop and hides the others, so that switching
    the optimizer or the loop brings up its own. Ranges come from the settings table (whole numbers up to
    1,000; a positive rate on a log scale; a fraction linear, up to at most 10)."""
    classes: list[Any] = []
    if OPTIMIZER in KNOBS[algorithm]:
        classes += [rule_class(name) for name in registered_rules()]
    if REPLICA_LOOP in KNOBS[algorithm]:
        classes += [replica_class(name) for name in registered_replicas()]
    knobs: dict[str, tuple[Knob, Any]] = {}
    for cls in classes:
        for name, default in knob_defaults(cls).items():
            knob = _knob(SETTINGS[name]) if name not in knobs else None
            if knob is not None:
                knobs[name] = (knob, default)
    return tuple(knobs.values())


def _knob(s: Any) -> Knob | None:
    """The control for setting ``s`` of a rule or loop (None: a kind no control shows)."""
    label = s.name.replace("_", " ")
    if s.kind == "int":
        return Knob(s.name, label, "int", s.lo or 0, min(s.hi or 1000, 1000))
    if s.kind == "float" and s.lo_open and s.lo == 0:  # a positive rate or epsilon: on a log scale
        hi = s.hi or 1.0
        return Knob(s.name, label, "log", min(1e-3, hi / 1000), hi)
    if s.kind == "float":  # a fraction (momentum, decay): linear, over at most [lo, 10]
        return Knob(s.name, label, "float", s.lo or 0, min(s.hi or 1.0, 10.0))
    if s.kind in ("choice", "bool"):
        return Knob(s.name, label, s.kind)
    return None


def at_scale(knobs: tuple[Knob, ...], machines: int | None) -> tuple[Knob, ...]:
    """The knobs for a simulated cluster: replicas up to its ``machines`` (``None``: a machine for every
    part, so up to 1,000), and fetch and push rates up to 100 (the paper's scale)."""
    wider = {"replicas": float(machines or 1000), "n_fetch": 100.0, "n_push": 100.0}
    return tuple(dataclasses.replace(k, hi=max(k.hi, wider[k.setting])) if k.setting in wider else k for k in knobs)


def make_control(knob: Knob, value: Any) -> w.Widget:
    """The widget for ``knob`` showing ``value`` (a range grows to take a value outside it; ``None``, an
    optional setting left unset, shows as the top of the range, and the panel disables the control)."""
    common: dict[str, Any] = dict(description=knob.label, style=STYLE, layout=w.Layout(width=WIDE.width),
                                  tooltip=SETTINGS[knob.setting].help)
    if value is None and knob.kind in ("int", "log", "float"):
        value = knob.hi
    if knob.kind == "int":
        control: w.Widget = w.IntSlider(value=int(value), min=int(knob.lo), max=int(max(knob.hi, value)),
                                        continuous_update=False, **common)
    elif knob.kind == "log":
        lo, hi = math.log10(min(knob.lo, value)), math.log10(max(knob.hi, value))
        control = w.FloatLogSlider(value=float(value), base=10, min=lo, max=hi, step=0.05, readout_format=".3g",
                                   continuous_update=False, **common)
    elif knob.kind == "float":
        control = w.FloatSlider(value=float(value), min=float(knob.lo), max=float(max(knob.hi, value)),
                                step=(knob.hi - knob.lo) / 100, readout_format=".3g", continuous_update=False,
                                **common)
    elif knob.kind == "choice":
        choices = registered_rules() if knob.setting == "optimizer" else (
            registered_replicas() if knob.setting == "replica" else SETTINGS[knob.setting].choices)
        control = w.Dropdown(options=list(choices), value=value, **common)
    else:
        control = w.Checkbox(value=bool(value), indent=False, description=knob.label,
                             tooltip=SETTINGS[knob.setting].help)
    control.add_class("dbkit-knob")
    control.add_class(f"dbkit-knob-{knob.setting.replace('_', '-')}")
    return control


class Straggler:
    """Slow one replica by a factor (DistBelief: a machine slower than the others)."""

    def __init__(self, slow: dict[int, float]) -> None:
        index, factor = next(iter(slow.items())) if slow else (0, 1.0)
        self.replica = w.BoundedIntText(value=index, min=0, max=255, description="slow replica",
                                        style=STYLE, layout=w.Layout(width="200px"))
        self.factor = w.FloatSlider(value=factor, min=1.0, max=20.0, step=0.5, description="slower by ×",
                                    continuous_update=False, style=STYLE, layout=WIDE,
                                    tooltip=SETTINGS["slow_replicas"].help)
        self.box = w.HBox([self.replica, self.factor])
        self.box.add_class("dbkit-straggler")

    def value(self) -> dict[int, float]:
        """``slow_replicas`` as the widgets say: ``{}`` at factor 1."""
        return {} if self.factor.value <= 1.0 else {int(self.replica.value): float(self.factor.value)}

    def show(self, slow: dict[int, float]) -> None:
        if slow:
            index, factor = next(iter(slow.items()))
            self.replica.value, self.factor.value = index, factor
        else:
            self.factor.value = 1.0
