"""One table of every setting a run has: its kind, its allowed range, and what it means.

The run configuration (``dbkit.config``), a replica's schedule
(``dbkit.downpour.exchange``), the shards' update rule (``dbkit.ps.rules``)
and Sandblaster's coordinator all check values against this table, so a
range is written once and every refusal reads the same: the setting's name,
what is allowed, and the value given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

ALGORITHMS = ("sgd", "downpour", "sandblaster")
MODELS = ("linear", "mlp", "speech", "image-local", "signal-local")
OPTIMIZERS = ("sgd", "adagrad")  # the built-in update rules; registered ones join ``SETTINGS["optimizer"]``
REPLICA_LOOPS = ("downpour",)  # the built-in replica loop; registered ones join ``SETTINGS["replica"]``
TRANSPORTS = ("socket", "actor")  # how replicas reach shards on other workers (issue #12)
RUNTIMES = ("dask", "in-process")  # where a job's workers run (dbkit.runtime)


@dataclass(frozen=True)
class Setting:
    """A setting's kind (``int``, ``float``, ``bool``, ``choice``, ``text``, ``widths``, ``factors``),
    its range ``[lo, hi]`` (``lo_open``: excluding ``lo``), its section of ``RunConfig``
    (``None`` for the common settings) and a one-line meaning in the paper's words."""

    name: str
    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] = ()
    section: str | None = None
    optional: bool = False
    help: str = ""

    def allowed(self) -> str:
        """The allowed values in words, for error messages and ``--help``."""
        if self.kind == "int":
            upper = f"{_num(self.hi)}]" if self.hi is not None else "inf)"
            return f"a whole number in [{_num(self.lo)}, {upper}"
        if self.kind == "float":
            return f"a finite number in {'(' if self.lo_open else '['}{_num(self.lo)}, {_num(self.hi)}]"
        if self.kind == "choice":
            return f"one of {self.choices}"
        if self.kind == "bool":
            return "True or False"
        if self.kind == "widths":
            return "layer widths >= 1 such as 256,256"
        if self.kind == "factors":
            return "{replica index: slow-down factor in [1, 1000]}"
        return "text"

    def check(self, value: Any) -> Any:
        """``value`` in its normal form (``int``, ``float``, tuple), or ``ValueError`` naming the setting."""
        if value is None and self.optional:
            return None
        ok, normal = _normalise(self, value)
        if not ok:
            raise ValueError(f"{self.name} must be {self.allowed()}, got {value!r}")
        return normal


def _num(x: float | None) -> str:
    if x is None:
        return "inf"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else str(x)


def _normalise(s: Setting, value: Any) -> tuple[bool, Any]:
    if s.kind == "int":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            return False, None
        whole = int(value)
        return (s.lo is None or whole >= s.lo) and (s.hi is None or whole <= s.hi), whole
    if s.kind == "float":
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            return False, None
        v = float(value)
        ok = math.isfinite(v) and (s.lo is None or (v > s.lo if s.lo_open else v >= s.lo))
        return ok and (s.hi is None or v <= s.hi), v
    if s.kind == "bool":
        return isinstance(value, (bool, np.bool_)), bool(value)
    if s.kind == "choice":
        return isinstance(value, str) and value in s.choices, value
    if s.kind == "text":
        return isinstance(value, str) and value != "", value
    if s.kind == "widths":
        try:
            widths = tuple(value)
        except TypeError:
            return False, None
        ok = bool(widths) and all(isinstance(w, (int, np.integer)) and not isinstance(w, bool) and w >= 1
                                  for w in widths)
        return ok, tuple(int(w) for w in widths) if ok else None
    if s.kind == "factors":
        try:
            pairs = tuple(sorted((dict(value) if not isinstance(value, dict) else value).items()))
            normal = tuple((int(i), float(f)) for i, f in pairs)
        except (TypeError, ValueError):
            return False, None
        ok = all(i >= 0 and math.isfinite(f) and 1.0 <= f <= 1000.0 for i, f in normal)
        return ok, normal
    raise AssertionError(f"unknown kind {s.kind}")


_TABLE = [
    # what and on what
    Setting("algorithm", "choice", choices=ALGORITHMS, help="sgd, downpour or sandblaster"),
    Setting("dataset", "text",
            help="digits, signals, synthetic, speech, or a path to a .npz file or an MNIST IDX folder"),
    Setting("model", "choice", choices=MODELS, help="network preset"),
    Setting("hidden", "widths", optional=True, help="hidden layer widths for mlp and speech"),
    Setting("l2", "float", 0.0, 10.0, help="L2 weight: loss + (l2/2)*||W||^2"),
    Setting("max_data_gib", "float", 0.0, 1024.0, lo_open=True,
            help="the most a dataset file's arrays may take decompressed, in GiB (a larger one is refused)"),
    # training
    Setting("batch_size", "int", 1, 1_000_000, help="examples per mini-batch"),
    Setting("lr", "float", 0.0, 100.0, lo_open=True, help="learning rate"),
    Setting("optimizer", "choice", choices=OPTIMIZERS,
            help="update rule where the parameters live; Adagrad keeps its accumulators on the shards"),
    Setting("steps", "int", 1, None, optional=True, help="training steps (over all replicas together)"),
    Setting("seconds", "float", 0.0, 7 * 24 * 3600.0, lo_open=True, optional=True, help="training time"),
    Setting("seed", "int", 0, 2**32 - 1, help="seed for initialisation, data order and splits"),
    Setting("eval_every", "int", 1, None, help="steps between evaluations"),
    Setting("target_accuracy", "float", 0.0, 1.0, lo_open=True, optional=True,
            help="test accuracy whose time to reach the report gives (the paper's Fig. 4 and 5)"),
    # machines
    Setting("replicas", "int", 1, 10_000, help="model replicas, each training on its own data shard"),
    Setting("shards", "int", 1, 10_000, help="parameter server shards, each owning a slice of the parameters"),
    Setting("workers", "int", 1, 256, help="workers dbkit starts: LocalCluster processes, or in-process workers"),
    Setting("runtime", "choice", choices=RUNTIMES,
            help="where the workers run: dask (a LocalCluster, or the scheduler's cluster) or in-process "
                 "(workers in this process, no Dask: for a machine or a lesson without a cluster)"),
    Setting("scheduler", "text", optional=True, help="address of a running Dask scheduler"),
    Setting("slow_replicas", "factors",
            help="make replica I FACTOR times slower (a straggler: Downpour and Sandblaster)"),
    # faults (issue #13): checkpoints, and what comes back after a machine is lost
    Setting("checkpoint_dir", "text", optional=True,
            help="directory the parameter shards checkpoint into (shared by every machine of a real cluster); "
                 "a lost shard comes back from it"),
    Setting("checkpoint_every", "float", 0.0, 24 * 3600.0, lo_open=True,
            help="seconds between the shards' checkpoints"),
    Setting("restart_replicas", "bool", help="replace a replica whose machine was lost, on a surviving worker"),
    Setting("heartbeat_timeout", "float", 0.0, 3600.0, lo_open=True,
            help="seconds a parameter shard may go without answering the driver before its machine counts as "
                 "hung: dropped from the cluster, its shards restored from their checkpoint (Downpour)"),
    # Downpour SGD (paper Sec. 4.1) and model partitioning (Sec. 3)
    Setting("partitions", "int", 1, 64, section="downpour",
            help="machines one replica's network is split across (model parallelism)"),
    Setting("n_fetch", "int", 1, 100_000, section="downpour", help="a replica fetches parameters every n_fetch steps"),
    Setting("n_push", "int", 1, 100_000, section="downpour",
            help="a replica pushes its accumulated gradient every n_push steps"),
    Setting("overlap", "bool", section="downpour",
            help="fetch and push in the background while computing (the paper's client; each partition of a "
                 "partitioned replica with its own shards); off: wait for each"),
    Setting("transport", "choice", choices=TRANSPORTS, section="downpour",
            help="how replicas fetch and push to shards on other workers: socket (their own TCP connection, "
                 "found through Dask; off by itself on a TLS cluster) or actor (Dask actor calls)"),
    Setting("replica", "choice", choices=REPLICA_LOOPS, section="downpour",
            help="what each replica does between its exchanges with the shards: downpour (the paper's client) "
                 "or a registered loop (dbkit.downpour.replica_kinds)"),
    Setting("warm_start_steps", "int", 0, None, section="downpour",
            help="one replica trains alone this many steps before the others join"),
    Setting("max_nonfinite", "int", 1, 100_000, section="downpour",
            help="consecutive non-finite gradients after which a replica stops as diverged"),
    # Sandblaster L-BFGS (paper Sec. 4.2)
    Setting("memory", "int", 1, 1000, section="sandblaster", help="L-BFGS (s, y) pairs kept on the shards"),
    Setting("iterations", "int", 1, None, section="sandblaster", help="at most this many L-BFGS iterations"),
    Setting("work_unit_size", "int", 0, None, section="sandblaster",
            help="examples per work unit; 0 = about a tenth of the batch per replica"),
    Setting("backup", "bool", section="sandblaster", help="backup copies of running units near the end of a batch"),
    Setting("balance", "bool", section="sandblaster", help="hand out units as replicas become free"),
    Setting("gtol", "float", 0.0, 1e6, section="sandblaster", help="stop when the gradient norm is at most gtol"),
    Setting("ftol", "float", 0.0, 1.0, section="sandblaster", help="stop when the loss falls by less than this"),
    Setting("push_every", "int", 1, 100_000, section="sandblaster",
            help="a replica pushes its committed gradients every push_every units"),
    # the sync SGD baseline
    Setting("on_cluster", "bool", section="sgd", help="keep the parameters on shard actors on a Dask cluster"),
]

SETTINGS: dict[str, Setting] = {s.name: s for s in _TABLE}


def check(name: str, value: Any) -> Any:
    """``SETTINGS[name].check(value)``: the value in normal form, or a ``ValueError`` naming ``name``."""
    return SETTINGS[name].check(value)


#: the section of the settings table that registered update rules and replica loops add their knobs to
KNOBS = "knobs"


def register_choice(name: str, choice: str) -> None:
    """Add ``choice`` to the choices of setting ``name`` (a registered update rule or replica loop)."""
    s = SETTINGS[name]
    if choice not in s.choices:
        SETTINGS[name] = replace(s, choices=(*s.choices, choice))


def register_knob(knob: Setting) -> None:
    """Add a registered rule's or loop's knob to the table (section ``knobs``), or refuse a name that a
    setting of another meaning holds (two extensions may share a knob only if they describe it alike)."""
    if not isinstance(knob, Setting):
        raise TypeError(f"a knob is a dbkit.settings.Setting, got {knob!r}")
    knob = replace(knob, section=KNOBS)
    held = SETTINGS.get(knob.name)
    if held is not None and held != knob:
        raise ValueError(f"knob {knob.name!r} is already a setting of another meaning ({held.help or held.kind}); "
                         "give it another name")
    SETTINGS[knob.name] = knob


# ---- knobs: an update rule's or a replica loop's own settings, each declared once ---------------------------
def knob(default: Any, kind: str, lo: float | None = None, hi: float | None = None, **options: Any) -> Any:
    """A knob declared once, as a dataclass field: its ``default``, and the ``Setting`` named after the field
    (``kind``, range and ``options`` such as ``help``) from which its check, its keyword and its place in the
    settings table follow (``knobs_of``)::

        @dataclass(frozen=True)
        class EASGDKnobs(Knobs):
            tau: int = knob(4, "int", 1, 100_000, help="EASGD: steps between two elastic exchanges")
    """
    return field(default=default, metadata={"knob": dict(kind=kind, lo=lo, hi=hi, **options)})


def knobs_of(cls: type) -> tuple[Setting, ...]:
    """The ``Setting`` of each ``knob(...)`` field of the dataclass ``cls``, in the order declared."""
    return tuple(Setting(f.name, **f.metadata["knob"]) for f in fields(cls) if "knob" in f.metadata)


@dataclass(frozen=True)
class Knobs:
    """A replica loop's own settings: subclass it with one ``knob(...)`` field each. Made from the loop's
    keyword arguments, each value checked against its ``Setting`` (out of range: a ``ValueError`` naming it)."""

    def __post_init__(self) -> None:
        for s in knobs_of(type(self)):
            object.__setattr__(self, s.name, s.check(getattr(self, s.name)))

    def values(self) -> dict[str, Any]:
        """Each knob's value, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
