"""The panel's widgets, laid out: its buttons, a control for each setting, the straggler, the status line,
the dashboard link and the plots; and which buttons may be pressed in which state. No handler is attached
here: the panel (``dbkit.widgets.panel``) wires them to its steering worker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ipywidgets as w

from .controls import BUTTON_STYLE, BUTTONS, KNOBS, Straggler, at_scale, make_control, rule_and_loop_knobs

#: a job's states in which it is over (Start makes a new run)
OVER = ("finished", "diverged", "failed", "stopped")


@dataclass
class PanelWidgets:
    """Every widget of one panel; ``box`` holds them all."""

    controls: dict[str, Any]  # setting -> its control
    straggler: Straggler | None
    buttons: dict[str, w.Button]
    status: w.HTML
    dashboard: w.HTML
    image: w.Image
    box: w.VBox


def panel_widgets(algorithm: str, config: Any, machines: int | None, simulated: bool) -> PanelWidgets:
    """The widgets of a panel for ``algorithm`` showing ``config``'s settings; on a ``simulated`` cluster of
    ``machines`` the replicas and rates reach its scale (``at_scale``)."""
    shown = at_scale(KNOBS[algorithm], machines) if simulated else KNOBS[algorithm]
    controls = {k.setting: make_control(k, config.get(k.setting)) for k in shown}
    own = {k.setting: make_control(k, _value(config, k.setting, default))
           for k, default in rule_and_loop_knobs(algorithm)}  # shown while the job's rule or loop has them
    straggler = Straggler(dict(config.slow_replicas)) if algorithm != "sgd" else None
    buttons = {}
    for name in BUTTONS[algorithm]:
        b = w.Button(description=name.capitalize(), button_style=BUTTON_STYLE[name], layout=w.Layout(width="130px"))
        b.add_class(f"dbkit-button-{name.replace(' ', '-')}")
        buttons[name] = b
    status, dashboard = w.HTML(), w.HTML()
    status.add_class("dbkit-status")
    image = w.Image(format="png", layout=w.Layout(width="100%", max_width="960px"))
    image.add_class("dbkit-plot")
    knobs = list(controls.values()) + ([straggler.box] if straggler is not None else [])
    half = (len(knobs) + 1) // 2
    own_box = w.Box(list(own.values()), layout=w.Layout(flex_flow="row wrap", max_width="700px"))
    own_box.add_class("dbkit-own-knobs")
    box = w.VBox([w.HBox(list(buttons.values())), w.HBox([w.VBox(knobs[:half]), w.VBox(knobs[half:])]),
                  own_box, status, dashboard, image])
    box.add_class("dbkit-panel")
    return PanelWidgets({**controls, **own}, straggler, buttons, status, dashboard, image, box)


def _value(config: Any, setting: str, default: Any) -> Any:
    """``setting`` as ``config`` has it; ``default`` for a knob of a rule or loop it did not choose."""
    try:
        return config.get(setting)
    except KeyError:
        return default


def pressable(state: str, stopped: bool, live: int) -> dict[str, bool]:
    """Which buttons may be pressed for a job in ``state`` (``stopped``: its stop() was called) with ``live``
    replicas: Start before it starts or once it is over, Pause while it runs, Resume while paused, Stop until
    stopped, and losing a replica only while two or more train."""
    over = state in OVER or stopped
    return {"start": state == "created" or over, "pause": state == "running", "resume": state == "paused",
            "stop": not stopped and state != "created", "lose a replica": not over and live >= 2}
