"""What a partition's worker on an emulated host was measured to do (``HostProbes``): the record that
``dbkit.calibration.host_probes`` fills and ``dbkit.emulate.profile.emulated_profile`` turns into a simulator
profile (DistBelief Sec. 3, Fig. 3)."""

from __future__ import annotations

from dataclasses import dataclass


def checked_seconds(name: str, value: object) -> float:
    """``value`` as float seconds if it is a measured time (> 0 and < 60 s), else a ``ValueError`` naming it."""
    if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < 60):
        raise ValueError(f"{name} must be measured seconds, > 0 and < 60, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class HostProbes:
    """What a partition's worker on an emulated host does, measured there (``dbkit.calibration.host_probes``):
    one gradient of ``probe_network("dense")`` and of ``probe_network("local")`` (batch 32) in a task on the
    host's Dask worker, where a partition computes; and one boundary message's hop between two hosts'
    partitions (a tiny network's partitioned step, less its arithmetic and its step in one partition, over its
    six one-way messages). Optionally: the same with a part of the probes' first layer on every host at once
    (``*_small_seconds``, for a rate that depends on the working set); and a step's own work beyond its
    arithmetic in one partition, for the tiny network (two layers with parameters, next to none of them:
    ``step_rest_seconds``) and the dense probe (the same, and its gradient gathered: ``dense_rest_seconds``);
    and the bulk probe's step in two partitions beyond its arithmetic, less its step in one partition beyond
    its arithmetic (``bulk_exchange_seconds``: what its boundary, a mebibyte each way, costs), and the same for
    the thin probe in two partitions (``thin_exchange_seconds``: ten exchanges of an 8 KiB message) and in four
    (``thin4_exchange_seconds``: ten of three messages), fitted together (``dbkit.emulate.exchange_fit``); and
    what a byte of an array of 32 MiB or more made anew costs beyond writing it (``fresh_seconds_per_byte``)."""

    dense_seconds: float
    local_seconds: float
    hop_seconds: float
    dense_small_seconds: float | None = None
    local_small_seconds: float | None = None
    step_rest_seconds: float | None = None
    dense_rest_seconds: float | None = None
    bulk_exchange_seconds: float | None = None
    thin_exchange_seconds: float | None = None
    thin4_exchange_seconds: float | None = None
    fresh_seconds_per_byte: float | None = None

    def __post_init__(self) -> None:
        checked_seconds("dense_seconds", self.dense_seconds)
        checked_seconds("local_seconds", self.local_seconds)
        checked_seconds("hop_seconds", self.hop_seconds)
        if self.fresh_seconds_per_byte is not None and not 0 <= self.fresh_seconds_per_byte < 1e-6:
            raise ValueError(f"fresh_seconds_per_byte must be measured seconds a byte, >= 0 and < 1e-6, "
                             f"got {self.fresh_seconds_per_byte!r}")
        if self.thin_exchange_seconds is not None and self.bulk_exchange_seconds is None:
            raise ValueError("thin_exchange_seconds needs bulk_exchange_seconds (the two are fitted together)")
        if self.thin4_exchange_seconds is not None and self.thin_exchange_seconds is None:
            raise ValueError("thin4_exchange_seconds needs thin_exchange_seconds (the three are fitted together)")
        if (self.step_rest_seconds is None) != (self.dense_rest_seconds is None):
            raise ValueError("step_rest_seconds and dense_rest_seconds go together (one is the other's baseline)")
        for name in ("dense_small_seconds", "local_small_seconds", "step_rest_seconds", "dense_rest_seconds",
                     "bulk_exchange_seconds", "thin_exchange_seconds", "thin4_exchange_seconds"):
            if getattr(self, name) is not None:
                checked_seconds(name, getattr(self, name))
