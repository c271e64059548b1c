"""A folder every worker must write to (a checkpoint folder): checked from each worker before anything starts.

On a real cluster each shard writes its own checkpoint file from its worker, so
the folder must be one the workers share with the driver (a network file
system), at the same absolute path. The driver's check alone would pass a folder
that is local to it, and the checkpoint would be scattered.
"""

from __future__ import annotations

from ..runtime.protocol import Runtime


def _probe(directory: str) -> str | None:
    """Runs on a worker: ``None`` if it can write in ``directory``, else why not."""
    from ..ps.checkpoint import probe_writable

    try:
        probe_writable(directory)
    except OSError as e:
        return str(e.strerror or e)
    return None


def check_workers_can_write(cluster: Runtime, directory: str) -> None:
    """``ValueError`` naming the first worker that cannot write in ``directory`` (an absolute path).

    Each worker makes the folder if it is missing and writes and drops a file in it, as the driver's
    own check does (``dbkit.ps.checkpoint.writable``).
    """
    answers = cluster.run_on_workers(_probe, directory)
    for worker in sorted(answers):
        why = answers[worker]
        if why is not None:
            why = why if isinstance(why, str) else f"{type(why).__name__}: {why}"
            raise ValueError(f"checkpoint_dir {directory!r} cannot be written from worker {worker} ({why}); on a "
                             "cluster of several machines it must be a folder they all share, at the same path")
