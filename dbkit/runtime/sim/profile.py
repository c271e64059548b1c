"""A simulated cluster's numbers: machines, network, arithmetic and shard costs (a *profile*).

Profiles are JSON files. ``here`` is the last ``dbkit calibrate`` of this
machine (kept in ``$DBKIT_PROFILES`` or ``~/.config/dbkit/profiles``; the one
shipped with dbkit was measured where it was written); ``distbelief-2012`` is
shaped like the paper's cluster, each number's source in its ``comments``.
Every field is checked on load: a missing field, a malformed file or a
non-positive rate is refused in one line naming the field.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .profile_ranges import ProfileError, check_machine, check_measured, check_number

NAMED = ("here", "distbelief-2012")
#: glibc's largest threshold for serving an allocation from the heap (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit):
#: larger ones are mapped from the kernel each time and unmapped when freed
FRESH_BYTES = 32 * 2**20
#: the largest profile file read (the shipped ones are 4-12 KB)
MAX_PROFILE_BYTES = 2**20
PACKAGED = Path(__file__).parent / "profiles"


@dataclass(frozen=True)
class MachineSpec:
    """Every simulated machine: ``cores``, a NIC of ``bandwidth`` bytes/s each way, ``latency`` seconds
    one way to any other machine. ``machines``: how many a cluster of this profile has by default
    (0: as many as the job's layout asks for, each replica and shard on machines of its own).
    ``cpu_factor``: every computation on a machine takes this many times its measured seconds (a Dask
    worker's own threads make its Python slower than a bare process's). ``host_cores``: when not 0, the
    ``machines`` are processes sharing one host of this many cores (dbkit's LocalCluster: two worker
    processes and the driver on one computer), and ``host_load`` of those cores are busy with work not
    simulated (the scheduler's and the driver's event loops). ``switch_seconds``: a machine is a Python
    process whose interpreter lets a waiting thread in after this long
    (``dbkit.runtime.sim.machines.when_free``; 0: not).
    ``release_seconds``: when not 0, a computation lets the machine's other threads' short work (a shard's
    service, a message's CPU) in at its next release of the interpreter lock, about this long after the work
    arrives, instead of after the whole computation; the next computation on the machine pays for it, and
    ``handoff_seconds`` more for each such hand-off of the lock (the switches there and back).
    ``shared_links``: 1 if messages crossing a NIC at once share it, as TCP flows through a link do
    (``dbkit.runtime.sim.shared_links``); 0 if each holds it in turn, first come, first served.
    ``burst_bytes``: a NIC's token bucket (``tc tbf``'s burst): a message that finds tokens leaves at once,
    the rest at the rate, and tokens come back at the rate up to this depth; charged by a partitioned step's
    chain (``partitioned_step``; the event-driven engine's NICs send every byte at the rate); 0: none."""

    cores: int
    bandwidth: float
    latency: float
    machines: int = 0
    threads_per_replica: int = 1
    cpu_factor: float = 1.0
    host_cores: int = 0
    host_load: float = 0.0
    switch_seconds: float = 0.0
    release_seconds: float = 0.0
    handoff_seconds: float = 0.0
    shared_links: int = 0
    burst_bytes: float = 0.0

    @property
    def host_slowdown(self) -> float:
        """How much longer work takes on a host whose cores others use ``host_load`` of."""
        return self.host_cores / max(1e-9, self.host_cores - self.host_load) if self.host_cores else 1.0


@dataclass(frozen=True)
class ComputeSpec:
    """Seconds of a gradient: ``step_seconds + layers * layer_seconds + batch * (dense flops /
    dense_flops_per_second + local flops / local_flops_per_second + units / elementwise_per_second)``
    (or, for a model measured by ``dbkit calibrate``, its own line ``measured["gradients"]``); a replica's
    step adds ``replica_step_seconds`` and ``update_seconds_per_parameter`` for its accrue, local step and
    finiteness check. ``contention``: each other replica on the same machine makes a replica's arithmetic
    take this fraction longer (threads taking turns at one interpreter lock). The ``*_working_set_*`` fields
    make a partition's rate depend on how much its part of a layer touches (``rate``; a partitioned step's
    arithmetic, DistBelief Fig. 3); 0, as in every shipped profile: one rate at any size.
    ``gather_seconds_per_parameter``: a partition writing its parameters' gradient into its vector each step
    (charged by ``partitioned_step``, with or without the update after it; 0 in every shipped profile).
    ``fresh_seconds_per_byte``: what each byte of an array of ``FRESH_BYTES`` or more made anew each step costs
    beyond writing it (the C library maps such arrays from the kernel and gives them back when freed, so
    each step's pages are faulted in and zeroed again: a partition's weight gradient and gradient vector, and
    a locally connected layer's patches, ``LayerShape.patch_bytes``; charged by ``partitioned_step``; 0 in
    every shipped profile)."""

    dense_flops_per_second: float
    local_flops_per_second: float
    elementwise_per_second: float
    step_seconds: float
    layer_seconds: float
    update_seconds_per_parameter: float
    replica_step_seconds: float = 0.0
    contention: float = 0.0
    dense_working_set_bytes: float = 0.0
    dense_working_set_floor_bytes: float = 0.0
    dense_working_set_exponent: float = 0.0
    local_working_set_bytes: float = 0.0
    local_working_set_floor_bytes: float = 0.0
    local_working_set_exponent: float = 0.0
    gather_seconds_per_parameter: float = 0.0
    fresh_seconds_per_byte: float = 0.0

    def fresh_seconds(self, nbytes: float) -> float:
        """What an array of ``nbytes`` made anew costs beyond writing it: nothing below ``FRESH_BYTES``."""
        return nbytes * self.fresh_seconds_per_byte if nbytes >= FRESH_BYTES else 0.0

    def rate(self, kind: str, working_set: float = 0.0) -> float:
        """Operations per second of ``kind``'s arithmetic (``"dense"``, ``"local"``, else elementwise) on a
        layer part whose arithmetic touches ``working_set`` bytes (``LayerShape.working_set_bytes``).

        Where the profile has a working set for the kind, its rate was measured there, and a part touching
        less runs faster as ``(measured working set / working set) ** exponent`` (the less a part touches, the
        more of it stays in a core's caches), down to the floor, the smallest working set measured: below it
        the rate is the floor's. With exponent 0 (every shipped profile) the rate is the same at any size."""
        if kind == "dense":
            base, ref, floor, exp = (self.dense_flops_per_second, self.dense_working_set_bytes,
                                     self.dense_working_set_floor_bytes, self.dense_working_set_exponent)
        elif kind == "local":
            base, ref, floor, exp = (self.local_flops_per_second, self.local_working_set_bytes,
                                     self.local_working_set_floor_bytes, self.local_working_set_exponent)
        else:
            return self.elementwise_per_second
        if not (ref and exp and working_set > 0):
            return base
        return base * (ref / max(working_set, floor)) ** exp


@dataclass(frozen=True)
class ShardSpec:
    """A shard's service: ``request_seconds`` per request, plus per float pushed (by update rule),
    fetched, or touched by a vector command (Sandblaster's dot, axpy, copy)."""

    request_seconds: float
    push_seconds_per_float_sgd: float
    push_seconds_per_float_adagrad: float
    fetch_seconds_per_float: float
    vector_seconds_per_float: float


@dataclass(frozen=True)
class MessageSpec:
    """What a data message (a fetch, a push, a boundary slice) costs the CPU at each end:
    ``cpu_seconds`` each, plus ``cpu_seconds_per_byte``; ``header_bytes`` go with every message.
    ``local_call_seconds``: a call to a shard on the caller's own machine (no NIC).
    ``control_seconds``: one way of a command (a coordinator's to a shard); ``task_seconds``: one way of a
    work unit or a flush sent to a replica (0: as a command); ``partition_message_seconds``: what a
    boundary message between partitions costs beyond its bytes; ``partition_seconds_per_byte``: what each of
    its bytes costs beyond the link's time for it (the copies and system calls at both ends, which a slow
    host pays on a fast link; 0: none); ``partition_exchange_seconds``: what each exchange of a partitioned
    step costs beyond its messages (a partition waiting for its partners' slices is woken when they have all
    come; on a host under a CPU quota that may wait for the quota's next period; 0: none). ``wire_scale``
    multiplies every data message's CPU (a real Dask worker's exchanges against the calibration rig's)."""

    cpu_seconds: float
    cpu_seconds_per_byte: float
    header_bytes: int
    local_call_seconds: float
    control_seconds: float
    partition_message_seconds: float
    task_seconds: float = 0.0
    wire_scale: float = 1.0
    partition_seconds_per_byte: float = 0.0
    partition_exchange_seconds: float = 0.0


@dataclass(frozen=True)
class Profile:
    """A named set of machine, network, arithmetic and shard numbers; ``comments`` says what each rests on."""

    name: str
    description: str
    machine: MachineSpec
    compute: ComputeSpec
    shard: ShardSpec
    message: MessageSpec
    comments: dict[str, str] = field(default_factory=dict)
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def but(self, **sections: dict[str, Any]) -> Profile:
        """A copy with some fields of some sections changed: ``profile.but(machine={"cores": 4})``."""
        changed = {k: _section(type(getattr(self, k)), {**asdict(getattr(self, k)), **v}, k, self.name)
                   for k, v in sections.items()}
        return Profile(**{**{f.name: getattr(self, f.name) for f in fields(self)}, **changed})


SECTIONS: dict[str, type] = {"machine": MachineSpec, "compute": ComputeSpec, "shard": ShardSpec,
                             "message": MessageSpec}
def _section(kind: type, values: Any, name: str, where: str) -> Any:
    if not isinstance(values, dict):
        raise ProfileError(f"profile {where}: {name} must be an object of fields, got {type(values).__name__}")
    out = {}
    for f in fields(kind):
        key = f"{name}.{f.name}"
        if f.name not in values:
            if f.default is not dataclass_missing():
                continue
            raise ProfileError(f"profile {where}: missing field {key}")
        v = values[f.name]
        whole = f.type in ("int", int)
        check_number(key, f.name, v, whole, where)
        out[f.name] = int(v) if whole else float(v)
    unknown = sorted(set(values) - {f.name for f in fields(kind)})
    if unknown:
        raise ProfileError(f"profile {where}: unknown field {name}.{unknown[0]}")
    return kind(**out)


def dataclass_missing() -> Any:
    from dataclasses import MISSING

    return MISSING


def from_dict(d: Any, where: str = "<dict>") -> Profile:
    """A checked ``Profile`` from its JSON form; ``ProfileError`` names the first bad field."""
    if not isinstance(d, dict):
        raise ProfileError(f"profile {where}: the file must hold one JSON object, got {type(d).__name__}")
    for key in ("name", *SECTIONS):
        if key not in d:
            raise ProfileError(f"profile {where}: missing field {key}")
    if not isinstance(d["name"], str) or not d["name"]:
        raise ProfileError(f"profile {where}: name must be a non-empty string, got {d['name']!r}")
    comments, measured = d.get("comments", {}), d.get("measured", {})
    if not isinstance(comments, dict) or not all(isinstance(v, str) for v in comments.values()):
        raise ProfileError(f"profile {where}: comments must map field names to text")
    if not isinstance(measured, dict):
        raise ProfileError(f"profile {where}: measured must be an object")
    unknown = sorted(set(d) - {"name", "description", "comments", "measured", *SECTIONS})
    if unknown:
        raise ProfileError(f"profile {where}: unknown field {unknown[0]}")
    check_measured(measured, where)
    sections = {k: _section(kind, d[k], k, where) for k, kind in SECTIONS.items()}
    m = sections["machine"]
    check_machine(m.cores, m.host_cores, m.host_load, where)
    return Profile(name=d["name"], description=str(d.get("description", "")), **sections,
                   comments=dict(comments), measured=dict(measured))


def noise_warning(profile: Profile) -> str | None:
    """A warning to repeat wherever ``profile`` is used, if ``dbkit calibrate --force`` wrote it on a machine
    too busy to measure (``measured.noise``); ``None`` for a profile measured steadily, or not measured."""
    noise = profile.measured.get("noise") if isinstance(profile.measured, dict) else None
    if not isinstance(noise, dict) or noise.get("trusted", True):
        return None
    return (f"warning: profile {profile.name} was measured on a busy machine (timings spread "
            f"{float(noise.get('spread', 0)):.0%}, drift {float(noise.get('drift', 0)):.0%}): its times may be off "
            "by as much; run dbkit calibrate again on an idle machine")


def user_folder() -> Path:
    """Where ``dbkit calibrate`` keeps this machine's ``here`` profile."""
    env = os.environ.get("DBKIT_PROFILES")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dbkit" / "profiles"


def read(path: str | os.PathLike[str]) -> Profile:
    """A profile from a JSON file (``ProfileError`` if it is missing, malformed or incomplete)."""
    p = Path(path)
    try:
        info = p.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would wait for a writer for ever, /dev/zero never end
            raise ProfileError(f"profile {p}: not a regular file ({_kind(info.st_mode)}); give a JSON file")
        if info.st_size > MAX_PROFILE_BYTES:
            raise ProfileError(f"profile {p}: {info.st_size:,} bytes, more than a profile's "
                               f"{MAX_PROFILE_BYTES:,}; is it a profile?")
        with open(p, "rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)  # (a file that grew since)
        if len(raw) > MAX_PROFILE_BYTES:
            raise ProfileError(f"profile {p}: more than a profile's {MAX_PROFILE_BYTES:,} bytes; is it a profile?")
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(f"profile {p}: not UTF-8 text (byte {e.start})") from e
    except OSError as e:
        raise ProfileError(f"profile {p}: cannot be read ({e.strerror or e})") from e
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProfileError(f"profile {p}: not valid JSON (line {e.lineno}: {e.msg})") from e
    return from_dict(d, str(p))


def _kind(mode: int) -> str:
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a file")


def load(name_or_path: str | os.PathLike[str] | Profile) -> Profile:
    """A profile by name (``here``: the last calibration, else the shipped one; ``distbelief-2012``)
    or from a file path."""
    if isinstance(name_or_path, Profile):
        return name_or_path
    name = os.fspath(name_or_path)
    if name == "here":
        mine = user_folder() / "here.json"
        return read(mine if mine.exists() else PACKAGED / "here.json")
    if name in NAMED:
        return read(PACKAGED / f"{name}.json")
    if not Path(name).suffix and not Path(name).exists():
        raise ProfileError(f"profile {name}: not a named profile ({', '.join(NAMED)}) nor a file")
    return read(name)


def write(profile: Profile, path: str | os.PathLike[str]) -> Path:
    """Write ``profile`` as JSON (to a temporary file first, then renamed); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(profile.to_dict(), indent=2))
    tmp.replace(p)
    return p
