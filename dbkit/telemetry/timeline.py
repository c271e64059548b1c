"""Sandblaster's last batch as a timeline: each replica's work units, backups and winners marked.

DistBelief Sec. 4.2: units are handed out as replicas become free, so a slow
replica does fewer; near the end of a batch backup copies of unfinished units
go to free replicas, and whichever copy finishes first wins.
"""

from __future__ import annotations

from typing import Any

from .events import BatchDone

WON, BACKUP_WON, BEATEN = "C0", "C1", "lightgray"
LEGEND = "blue: counted · orange: a backup that won · gray: a copy beaten by another"


def timeline_extent(batch: BatchDone) -> tuple[float, list[int]]:
    """The batch's length in seconds (from its first unit) and its replicas."""
    t0 = min(u.start for u in batch.units)
    end = max((u.end for u in batch.units if u.end is not None), default=t0)
    return end - t0, sorted({u.replica for u in batch.units})


def timeline_artists(ax: Any, batch: BatchDone, animated: bool = False) -> list:
    """Add ``batch``'s units to ``ax`` (a matplotlib Axes), one row per replica, seconds from the
    batch's start; returns the artists added (``animated``: for a figure that blits)."""
    t0 = min(u.start for u in batch.units)
    length, _ = timeline_extent(batch)
    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for u in batch.units:
        stop = u.end if u.end is not None else t0 + length
        colour = (BACKUP_WON if u.backup else WON) if u.won else BEATEN
        spans.setdefault((u.replica, colour), []).append((u.start - t0, max(stop - u.start, 1e-4)))
    artists = [ax.broken_barh(s, (replica - 0.4, 0.8), facecolors=colour, edgecolors="white", linewidth=0.3,
                              animated=animated) for (replica, colour), s in spans.items()]
    backups = [u for u in batch.units if u.backup]
    lost = f", lost r{', r'.join(str(x.replica) for x in batch.lost)}" if batch.lost else ""
    artists.append(ax.text(0.99, 0.98, f"batch {batch.batch}: {batch.seconds:.2f} s, {len(backups)} backups "
                           f"({sum(u.won for u in backups)} won){lost}", ha="right", va="top",
                           transform=ax.transAxes, fontsize=8, animated=animated))
    return artists
