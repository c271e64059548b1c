"""The records a parameter shard answers with and counts in: what a push did, where a shard listens, and
counts of integer values (the staleness of pushes), all immutable.

A shard counts how stale each push is in versions; replicas count the same
and the age of each push in examples. Windows of a running job are
differences of two cumulative histograms (``later - earlier``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def coarse(value: int, bits: int = 3) -> int:
    """``value`` rounded down to its ``bits`` leading binary digits (exact below ``2**bits``).

    Ages in examples take many values; this keeps about ``3 * log2(max)``
    distinct ones, each the lower edge of a bin a fraction 1/8 wide or narrower.
    """
    value = int(value)
    if value < (1 << bits):
        return value
    shift = value.bit_length() - bits
    return (value >> shift) << shift


@dataclass(frozen=True)
class Histogram:
    """``counts[i]`` occurrences of ``values[i]``; values sorted and distinct."""

    values: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()

    @classmethod
    def of(cls, counts: Mapping[int, int]) -> Histogram:
        items = sorted((int(v), int(c)) for v, c in counts.items() if c)
        return cls(tuple(v for v, _ in items), tuple(c for _, c in items))

    @classmethod
    def total(cls, histograms: Iterable[Histogram]) -> Histogram:
        out: Counter[int] = Counter()
        for h in histograms:
            out.update(h.as_counter())
        return cls.of(out)

    def as_counter(self) -> Counter[int]:
        return Counter(dict(zip(self.values, self.counts)))

    def __sub__(self, earlier: Histogram) -> Histogram:
        """What was counted after ``earlier`` (a window), when both are cumulative."""
        out = self.as_counter()
        out.subtract(earlier.as_counter())
        return Histogram.of({v: c for v, c in out.items() if c > 0})

    @property
    def count(self) -> int:
        return int(sum(self.counts))

    def mean(self) -> float:
        n = self.count
        return float(np.dot(self.values, self.counts) / n) if n else 0.0

    def quantile(self, p: float) -> int:
        """The smallest value with at least a fraction ``p`` of the counts at or below it (0 if empty)."""
        if not self.counts:
            return 0
        cum = np.cumsum(self.counts)
        return int(self.values[int(np.searchsorted(cum, p * cum[-1]))])

    def max(self) -> int:
        return int(self.values[-1]) if self.values else 0

    def binned(self, width: int) -> Histogram:
        """The counts summed over bins ``width`` wide, each named by its lower edge (``width`` 1: itself)."""
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"a bin's width is a whole number >= 1, got {width!r}")
        if width == 1:
            return self
        out: Counter[int] = Counter()
        for v, c in zip(self.values, self.counts):
            out[v // width * width] += c
        return Histogram.of(out)

    def summary(self) -> dict:
        """``{count, mean, p50, p95, max}``: the report's staleness block."""
        return {"count": self.count, "mean": self.mean(), "p50": self.quantile(0.5), "p95": self.quantile(0.95),
                "max": self.max()}


def staleness_summary(counts: Mapping[int, int]) -> dict:
    """``{count, mean, p50, p95, max}`` of integer values given as counts."""
    return Histogram.of(counts).summary()

@dataclass(frozen=True)
class PushAnswer:
    """A shard's answer to one push (or accumulate).

    ``staleness`` is the shard's version now minus the version the pusher
    fetched (DistBelief Sec. 4.1); ``age`` the examples the shard applied since
    the pusher's oldest gradient in this push was computed, plus the push's own
    examples: it grows with ``n_fetch`` and ``n_push``. Both are ``None`` when
    the push was refused (``reason`` says why) or is not a Downpour push.
    """

    accepted: bool
    version: int = 0
    staleness: int | None = None
    age: int | None = None
    reason: str | None = None


@dataclass(frozen=True)
class ShardFigures:
    """One shard's counters, for reports and plots (``worker`` is where it lives)."""

    index: int
    start: int
    stop: int
    version: int
    fetches: int
    rejected: int
    optimizer: str
    lr: float
    bytes_fetched: int
    bytes_pushed: int
    examples: int
    staleness: Histogram = Histogram()
    age: Histogram = Histogram()
    rejections: dict[str, int] = field(default_factory=dict)
    pushers: dict[str, int] = field(default_factory=dict)
    worker: str = "local"
    rule_settings: dict[str, Any] = field(default_factory=dict)  # the update rule's own knobs

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def updates(self) -> int:
        return self.version

    def to_dict(self) -> dict:
        """The report's row: DESIGN.md's ``worker, size, updates, rejected, staleness`` and the rest."""
        return {"index": self.index, "worker": self.worker, "start": self.start, "stop": self.stop,
                "size": self.size, "version": self.version, "updates": self.updates, "fetches": self.fetches,
                "rejected": self.rejected, "rejections": dict(self.rejections), "pushers": dict(self.pushers),
                "staleness": self.staleness.summary(), "staleness_examples": self.age.summary(),
                "examples": self.examples, "bytes_fetched": self.bytes_fetched, "bytes_pushed": self.bytes_pushed,
                "optimizer": self.optimizer, "lr": self.lr, "rule_settings": dict(self.rule_settings)}


@dataclass(frozen=True)
class WireAddress:
    """Where a worker's shard wire listens (``dbkit.ps.wire_server``), and the token it asks for (hex)."""

    host: str
    port: int
    token: str
