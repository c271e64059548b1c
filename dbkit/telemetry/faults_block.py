"""The report's ``faults`` block, from a job's events: what was lost to dead machines and what came back.

Downpour and Sandblaster both write it (issue #13; Sandblaster's since issue #21), so one report
reader serves both.
"""

from __future__ import annotations

from typing import Any

from .events import Checkpointed, EventStream, ReplicaEvent, ShardLost, WorkerHung, WorkerSilent


def faults_block(events: EventStream, checkpoint_dir: str | None, checkpoints: int | None = None,
                 unrestored: int = 0) -> dict[str, Any]:
    """Checkpoints written into ``checkpoint_dir`` (default: every ``Checkpointed`` event), shards lost
    (``unrestored``: lost for good, with no event) and restored, the updates (Sandblaster: iterations)
    lost with them, replicas lost and restarted, workers dropped for not answering (``WorkerHung``), and
    workers that were silent for less than the heartbeat's timeout and came back (``WorkerSilent``: a network
    partition that healed), with how long."""
    lost = events.of(ShardLost)
    replicas = events.of(ReplicaEvent)
    saved = len(events.of(Checkpointed)) if checkpoints is None else checkpoints
    return {"checkpoint_dir": checkpoint_dir, "checkpoints": saved,
            "shards_lost": len(lost) + unrestored, "shards_restored": len(lost),
            "updates_lost": sum(e.updates_lost or 0 for e in lost),
            "replicas_lost": sum(e.what == "lost" for e in replicas),
            "replicas_restarted": sum(e.what == "restarted" for e in replicas),
            "restores": [e.to_dict() for e in lost],
            "workers_hung": [e.to_dict() for e in events.of(WorkerHung)],
            "workers_silent": [e.to_dict() for e in events.of(WorkerSilent)]}
