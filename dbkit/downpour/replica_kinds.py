"""The replica loops a Downpour job can run, by name (the extension point for what a replica does).

A replica loop is a subclass of ``DownpourReplica`` that overrides ``step``
(and, if it keeps something to push, ``flush``), built from the replica's
public parts: its ``schedule`` (when to fetch and push), its ``exchange``
(the accrued gradient and the fetches and pushes under way), its ``batches``
and ``network``, its ``counters``, and ``took_params`` (what a fetch brought). Its own settings are ``knobs``
(``dbkit.settings.Setting``s, range-checked as every setting is) and arrive
as keyword arguments of its constructor. ``shard_rate`` names the knob that
sets the rate the shards apply (DiLoCo's outer rate, EASGD's moving rate);
without one the shards use the run's ``lr``, as Downpour does. ``optimizers``
lists the shard rules it is meant for (None: any).

Registering one (``@register_replica``) makes it a choice of the ``replica``
setting: ``DownpourSGD(..., replica="diloco", inner_steps=8)``, ``dbkit run
downpour --replica diloco --inner-steps 8``, the panel and the simulator,
which all start replicas through ``run_replica``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..named_classes import NamedClasses
from ..settings import knobs_of

if TYPE_CHECKING:
    from .replica import DownpourReplica

LOOPS = NamedClasses("replica", "replica loop", "diloco")


def register_replica(cls: type[DownpourReplica]) -> type[DownpourReplica]:
    """Make ``cls`` usable by its ``name`` as a run's ``replica`` (a class decorator); refused with a clear
    message: not a ``DownpourReplica``, no name, a name taken by another class, a ``shard_rate`` that is not
    one of its knobs, a knob whose name a setting of another meaning holds."""
    from .replica import DownpourReplica

    if not (isinstance(cls, type) and issubclass(cls, DownpourReplica)):
        raise TypeError(f"register_replica takes a subclass of DownpourReplica, got {cls!r}")
    if "knobs" not in cls.__dict__:  # declared once, as its ``Knobs``' fields
        cls.knobs = knobs_of(cls.Knobs)
    own = [k.name for k in cls.knobs]
    if cls.shard_rate is not None and cls.shard_rate not in own:
        raise ValueError(f"{cls.__name__}: shard_rate {cls.shard_rate!r} is not one of its knobs {own}")
    LOOPS.add(cls)
    return cls


def replica_class(name: str) -> type[DownpourReplica]:
    """The replica loop registered as ``name``, or ``ValueError`` listing those registered."""
    return LOOPS.get(name)


def registered_replicas() -> tuple[str, ...]:
    return LOOPS.names()


def knob_defaults(cls: Any) -> dict[str, Any]:
    """The default of each of ``cls``'s knobs (a class attribute of the same name, or the dataclass field's)."""
    import dataclasses

    declared = getattr(cls, "Knobs", cls)  # a loop's knobs are its ``Knobs``' fields, a rule's its own
    fields = {f.name: f.default for f in dataclasses.fields(declared)} if dataclasses.is_dataclass(declared) else {}
    return {k.name: fields.get(k.name, getattr(cls, k.name, None)) for k in cls.knobs}


def describe_replicas() -> str:
    """One line per registered replica loop: its name, first docstring line and knobs (``--help``)."""
    return LOOPS.describe()

