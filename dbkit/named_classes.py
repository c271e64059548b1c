"""Classes registered by name under a setting: the update rules (``optimizer``) and the replica loops
(``replica``) that a run chooses by name. Each registry owns its names; a registered class's ``knobs``
join the settings table, so that its own settings are range-checked as every setting is."""

from __future__ import annotations

from typing import Any

from .settings import SETTINGS, register_choice, register_knob


def _where(cls: Any) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _same_definition(a: Any, b: Any) -> bool:
    """Whether ``b`` is ``a`` or the same definition run again: a notebook cell run twice, a module
    reloaded, an extension file imported by a worker as by the driver (same module, same name). A class of
    another module (a built-in's name in a file of one's own, two files each with a ``ClippedSGD``) is not."""
    return a is b or (a.__module__ == b.__module__ and a.__qualname__ == b.__qualname__)


class NamedClasses:
    """The classes registered as the choices of setting ``setting`` (``what`` names one in messages; no
    ``setting``: chosen by code, not by a run's settings, as a loop names its coordinator)."""

    def __init__(self, setting: str | None, what: str, example: str) -> None:
        self.setting, self.what, self.example = setting, what, example
        self._classes: dict[str, Any] = {}

    def add(self, cls: Any) -> None:
        """Register ``cls`` under its ``name`` (checked: a name, not another class's) with its ``knobs``."""
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(f"{cls.__name__}: {self.what} needs a name such as {self.example!r}, got {name!r}")
        taken = self._classes.get(name)
        if taken is not None and not _same_definition(taken, cls):
            raise ValueError(f"the {self.what} name {name!r} is taken by {_where(taken)}; {_where(cls)} cannot "
                             f"take it too: give it a name of its own")
        for knob in getattr(cls, "knobs", ()):
            register_knob(knob)
        self._classes[name] = cls
        if self.setting is not None:
            register_choice(self.setting, name)

    def get(self, name: str) -> Any:
        """The class registered as ``name``, or ``ValueError`` listing those registered."""
        cls = self._classes.get(name) if isinstance(name, str) else None
        if cls is None:
            raise ValueError(f"{self.setting or self.what} must be one of {self.names()}, got {name!r}")
        return cls

    def names(self) -> tuple[str, ...]:
        return tuple(self._classes)

    def describe(self) -> str:
        """One line per class: its name, its first docstring line and its knobs' flags (``--help``)."""
        lines = []
        for name, cls in self._classes.items():
            doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
            knobs = ", ".join(f"--{k.name.replace('_', '-')} ({SETTINGS[k.name].allowed()})"
                              for k in getattr(cls, "knobs", ()))
            lines.append(f"{name}: {doc}" + (f" [{knobs}]" if knobs else ""))
        return "\n".join(lines)
