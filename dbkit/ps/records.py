"""What a parameter shard answers: to a push (``PushAnswer``) and when asked for its figures (``ShardFigures``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .histogram import Histogram


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
