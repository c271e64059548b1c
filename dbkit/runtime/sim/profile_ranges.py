"""What a profile's numbers may be (issue #48): each field's range, the machine's fields against each other, and
the tables of ``measured`` that the simulator reads. A profile outside them is refused in one line naming its
file and field, before a simulation builds a machine: a billion machines, a core count of 10^12, a link of
1e-300 bytes a second or a latency of 1e300 seconds would otherwise take all memory or run for ever."""

from __future__ import annotations

import math
import sys
from typing import Any


class ProfileError(ValueError):
    """A profile file that cannot be used: says which file and which field."""


#: the most machines a profile (or ``sim.Cluster(machines=)``) may ask for
MAX_MACHINES = 100_000
#: the most cores (or threads) a machine of a profile may have
MAX_CORES = 4096

#: fields that may be zero (a cost that is absent); all other numbers must be positive
MAY_BE_ZERO = {"latency", "machines", "step_seconds", "layer_seconds", "update_seconds_per_parameter",
               "replica_step_seconds", "task_seconds", "contention", "dense_working_set_bytes",
               "dense_working_set_floor_bytes", "dense_working_set_exponent", "local_working_set_bytes",
               "local_working_set_floor_bytes", "local_working_set_exponent", "gather_seconds_per_parameter",
               "fresh_seconds_per_byte",
               "host_cores", "host_load", "switch_seconds",
               "release_seconds", "handoff_seconds", "shared_links", "burst_bytes",
               "request_seconds", "cpu_seconds", "cpu_seconds_per_byte", "header_bytes", "local_call_seconds",
               "control_seconds", "partition_message_seconds", "partition_seconds_per_byte",
               "partition_exchange_seconds", "push_seconds_per_float_sgd", "push_seconds_per_float_adagrad",
               "fetch_seconds_per_float", "vector_seconds_per_float"}

#: a rate's upper bound: none but a finite number's (a link or a core as fast as a test's free communication
#: is harmless: its work takes no time; a slow one is what runs for ever)
FAST = sys.float_info.max
#: each field's range, ``(lowest, highest)``; a field that may not be zero must also be above 0
RANGES: dict[str, tuple[float, float]] = {
    "cores": (1, MAX_CORES), "threads_per_replica": (1, MAX_CORES), "host_cores": (0, MAX_CORES),
    "host_load": (0, MAX_CORES), "machines": (0, MAX_MACHINES),
    "bandwidth": (1e3, FAST),  # bytes a second: at least 8 kbit/s
    "latency": (0, 10.0), "cpu_factor": (1e-3, 1e4), "wire_scale": (1e-3, 1e4),
    "shared_links": (0, 1), "burst_bytes": (0, 1e12), "header_bytes": (0, 1e9), "contention": (0, 100.0),
    "dense_flops_per_second": (1e3, FAST), "local_flops_per_second": (1e3, FAST),
    "elementwise_per_second": (1e3, FAST),
    "dense_working_set_bytes": (0, 1e15), "dense_working_set_floor_bytes": (0, 1e15),
    "local_working_set_bytes": (0, 1e15), "local_working_set_floor_bytes": (0, 1e15),
    "dense_working_set_exponent": (0, 1), "local_working_set_exponent": (0, 1),
}
#: by the field name's ending, for the rest: a cost in seconds, or seconds per byte, float or parameter
BY_ENDING = {"_seconds": (0, 3600.0), "_per_byte": (0, 1.0), "_per_float": (0, 1.0), "_per_parameter": (0, 1.0),
             "_per_float_sgd": (0, 1.0), "_per_float_adagrad": (0, 1.0)}


def field_range(name: str) -> tuple[float, float]:
    """The range of a profile field ``name`` (``KeyError`` for a field with none: every field has one)."""
    if name in RANGES:
        return RANGES[name]
    for ending, bounds in BY_ENDING.items():
        if name.endswith(ending):
            return bounds
    raise KeyError(name)


def check_number(key: str, name: str, value: Any, whole: bool, where: str) -> float:
    """``value`` of field ``key`` (section.name) as a number in its range, or ``ProfileError`` naming both."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not float(value).is_integer()):
        raise ProfileError(f"profile {where}: {key} must be a {'whole ' if whole else ''}number, got {value!r}")
    low, high = field_range(name)
    zero = name in MAY_BE_ZERO
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise ProfileError(f"profile {where}: {key} must be a finite number {'>= 0' if zero else '> 0'}, "
                           f"got {value!r}")
    if value > high or (value < low and not (zero and value == 0)):
        raise ProfileError(f"profile {where}: {key} must be in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def check_machine(cores: int, host_cores: int, host_load: float, where: str) -> None:
    """The machine's fields against each other: the load of a shared host below its cores."""
    if host_cores and host_load >= host_cores:
        raise ProfileError(f"profile {where}: machine.host_load must be below machine.host_cores ({host_cores}), "
                           f"got {host_load!r}")
    if not host_cores and host_load:
        raise ProfileError(f"profile {where}: machine.host_load is {host_load!r} but machine.host_cores is 0 "
                           "(no shared host)")


def _numbers(value: Any, key: str, count: int, where: str) -> None:
    ok = (isinstance(value, list) and len(value) == count and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1e9
        for v in value))
    if not ok:
        raise ProfileError(f"profile {where}: {key} must be a list of {count} finite numbers >= 0, got {value!r}")


def check_measured(measured: dict[str, Any], where: str) -> None:
    """The tables of ``measured`` that the simulator reads: ``gradients`` (a model's key to ``[seconds,
    seconds per example]``), ``gradient_factor`` (a model's key to a factor), ``wire_cpu`` (rows of ``[bytes,
    client seconds, server seconds, local seconds]``) and ``noise``; the rest is a record, not read."""
    for table in ("gradients", "gradient_factor"):
        rows = measured.get(table, {})
        if not isinstance(rows, dict):
            raise ProfileError(f"profile {where}: measured.{table} must map model keys to numbers, got "
                               f"{type(rows).__name__}")
        for model, line in rows.items():
            key = f"measured.{table}.{model}"
            if table == "gradients":
                _numbers(line, key, 2, where)
            elif isinstance(line, bool) or not isinstance(line, (int, float)) or not 1e-3 <= line <= 1e3:
                raise ProfileError(f"profile {where}: {key} must be a number in [0.001, 1000], got {line!r}")
    wire = measured.get("wire_cpu")
    if wire is not None:
        if not isinstance(wire, list) or not wire:
            raise ProfileError(f"profile {where}: measured.wire_cpu must be a list of rows, got {wire!r:.80}")
        for i, row in enumerate(wire):
            _numbers(row, f"measured.wire_cpu[{i}]", 4, where)
    noise = measured.get("noise")
    if noise is not None and not (isinstance(noise, dict) and all(
            isinstance(noise.get(k, 0), (int, float)) for k in ("spread", "drift"))):
        raise ProfileError(f"profile {where}: measured.noise must hold numbers spread and drift, got {noise!r:.80}")
