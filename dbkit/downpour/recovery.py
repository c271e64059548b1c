"""A Downpour job's checkpoints, and what it does when a machine is lost (DistBelief Sec. 4.1; issue #13).

The paper's Downpour "is more robust to machine failures than synchronous
SGD": a lost replica costs only its own work, and a parameter shard comes back
from its last checkpoint. Here:

- every ``every`` seconds each shard writes its checkpoint into the job's
  directory (``dbkit.ps.checkpoint``), and the driver writes the manifest;
- a shard whose worker is gone is started again on a live worker from its
  checkpoint: the replicas are stopped, the shard replaced, and every replica
  that ended since the shards were last all alive is started again on its data
  shard. The updates the shard applied after its checkpoint are lost, and
  counted;
- without a usable checkpoint the job cannot go on: ``restore`` raises
  ``CheckpointError`` and the job ends cleanly with the surviving parameters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..config import RunConfig
from ..partition import AlignedLayout
from ..ps import Checkpoint, CheckpointError, Manifest, ShardState, read_shard, shard_file, write_manifest
from ..ps.checkpoint import writable
from ..runtime.protocol import Runtime
from ..telemetry import Checkpointed, ErrorEvent, EventStream, ReplicaEvent, ShardLost, faults_block
from .fleet import Fleet
from .placement import Placement

VICTIM_WAIT = 2.0  # seconds a restore waits for the replicas it stops (see Recovery.restore)


class Recovery:
    """The checkpoint directory of one job, when it is next due, the versions last saved, and what the
    job does when a worker is lost. The job's monitor calls ``tick`` with ``fleet.launching`` held.

    Parameters
    ----------
    directory : str or None
        Where the shards checkpoint (None: never; a lost shard then ends the job).
    every : float
        Seconds between checkpoints.
    model : str
        The network's fingerprint, written into every checkpoint and checked on reading.
    job : JobLink
        What it tells the job: events, failure, replica transitions, progress.
    """

    def __init__(self, directory: str | None, every: float, model: str, job: JobLink) -> None:
        if directory is not None:
            writable(directory)
        self.directory, self.every, self.model, self.job = directory, float(every), model, job
        self.saved: dict[int, int] = {}  # shard -> version of its last checkpoint in this layout
        self.count = 0
        self._next = 0.0
        self.all_alive_at = 0.0  # job time at which every shard's worker was last seen alive

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def new_layout(self) -> None:
        """The shards were laid out anew: earlier checkpoints cover other ranges; save again at once."""
        self.saved, self._next = {}, 0.0

    # ---- checkpoints ----------------------------------------------------------------------------
    def save(self, placement: Placement, config: RunConfig, directory: str | None = None) -> tuple[int, ...] | None:
        """Checkpoint every shard into ``directory`` (default: the job's), then the manifest; returns the
        versions saved, or None if a shard did not answer (an error event; the manifest stays as it was).
        Each shard's file is its own: a shard that wrote its file and died before answering leaves that
        newer file, and a restore reads it (``ShardLost.checkpoint_version`` says which)."""
        own = directory is None or directory == self.directory
        directory = directory or self.directory
        assert directory is not None
        saved, failed = placement.save(directory, self.model)
        server = placement.server
        assert server is not None
        if own:
            self.saved.update(saved)
        for i, why in sorted(failed.items()):
            self.job.events.emit(ErrorEvent, where=f"checkpoint of shard {i}", message=why)
        if failed:
            return None
        versions = tuple(saved[i] for i in range(len(server.shards)))
        write_manifest(directory, Manifest(self.model, server.layout.size, "downpour", placement.partitions,
                                           tuple(server.layout.ranges), versions, config.to_dict(), time.time()))
        if own:
            self.count += 1
        self.job.events.emit(Checkpointed, directory=str(directory), step=self.job.progress(), versions=versions)
        return versions

    def load(self, index: int, span: tuple[int, int]) -> ShardState:
        """Shard ``index``'s last checkpoint, checked to be of this model and this range."""
        if self.directory is None:
            raise CheckpointError("no checkpoint directory was given (checkpoint_dir, --checkpoint-dir)")
        if index not in self.saved:
            raise CheckpointError(f"shard {index} has no checkpoint in this layout yet")
        return read_shard(shard_file(self.directory, index), self.model, span)

    def figures(self, unrestored: dict[int, str]) -> dict[str, Any]:
        """The report's ``faults`` block: checkpoints, shards lost and restored (``unrestored``: those
        lost for good), updates lost, replicas lost and restarted."""
        return faults_block(self.job.events, self.directory, self.count, len(unrestored))

    # ---- lost workers ---------------------------------------------------------------------------
    def tick(self, placement: Placement, fleet: Fleet, config: RunConfig, now: float, alive: set[str] | None
             ) -> None:
        """With ``alive`` (the workers the scheduler lists, when the monitor asked it), notice lost workers:
        bring their shards back (or end the job) and replace replicas lost with them (``restart_replicas``).
        Checkpoint when due."""
        if alive is not None:
            dead = placement.forget_workers(alive)
            fleet.note_dead_workers(alive)
            if not dead:
                self.all_alive_at = now
            elif not self.restore(placement, fleet, dead, config, now):
                return
            if config.restart_replicas and fleet.relaunch(fleet.lost_unreplaced()):
                self.job.note_replicas()
        if self.directory is not None and now >= self._next:
            self._next = now + self.every
            self.save(placement, config)

    def restore_lost(self, cluster: Runtime, placement: Placement, fleet: Fleet, config: RunConfig, now: float
                     ) -> bool:
        """Every replica ended on a connection to a shard found dead when read (``placement.lost_shards``),
        maybe before the scheduler dropped its worker: restore those shards. False if there were none to
        restore, or the job could not go on."""
        dead = sorted(placement.last_read.lost)
        if not (self.enabled and dead):
            return False
        placement.forget_workers(set(cluster.workers()) - set(placement.workers_of(dead)))
        return self.restore(placement, fleet, dead, config, now)

    def restore(self, placement: Placement, fleet: Fleet, dead: list[int], config: RunConfig, now: float) -> bool:
        """Bring shards ``dead`` back from their checkpoints on live workers, and start again every replica
        that ended since the shards were last all alive (those still running are stopped first). Every
        checkpoint is read and checked before anything changes. False: the job could not go on and
        has ended as failed, keeping the surviving shards' parameters."""
        t0 = time.monotonic()
        server = placement.server
        assert server is not None
        lost_on = {i: server.workers[i] for i in dead}
        try:
            states = {i: self.load(i, placement.span(i)) for i in dead}
        except CheckpointError as e:
            for i in dead:
                placement.last_read.mark_lost(i, "the scheduler no longer lists its worker")
            placement.parameters()  # the others' parameters, fresh, while they are there
            why = f". Its checkpoint could not be used: {e}" if self.enabled else ""
            self.job.fail("the parameter server", RuntimeError(placement.last_read.describe_lost(server) + why))
            return False
        ended = {e.replica: e.t for e in self.job.events.of(ReplicaEvent) if e.what in ("lost", "failed")}
        victims = fleet.live() + sorted(i for i, t in ended.items() if t >= self.all_alive_at - 1.0
                                        and i not in fleet.replaced and i not in fleet.crashed)
        if not config.restart_replicas:
            victims = [i for i in victims if i not in fleet.machine_lost]
        read = {i: max(placement.last_read.version_of(i, server), states[i].version) for i in dead}
        with fleet.launching:
            # a replica stuck in a call to the dead shard ends when the call times out (CALL_TIMEOUT);
            # it cannot reach the new shard, so the restore does not wait for it
            fleet.stop([i for i in victims if i in fleet.live()], state="interrupted", timeout=VICTIM_WAIT)
            where = {i: placement.replace_shard(i, s, config.rule(), config.shard_lr()) for i, s in states.items()}
            placement.forget_gone()  # a machine lost during the restore takes no replica
            fleet.relaunch(victims)
        seconds = time.monotonic() - t0
        for i, s in states.items():
            self.job.events.emit(ShardLost, shard=i, worker=lost_on[i], step=self.job.progress(),
                                 restored_on=where[i], checkpoint_version=s.version, version_read=read[i],
                                 updates_lost=read[i] - s.version, seconds=seconds,
                                 reason=f"its worker {lost_on[i]} is gone")
        self.job.note_replicas()
        self.all_alive_at = now
        return True


class JobLink:
    """What ``Recovery`` tells its job: the event stream, a failure, replica transitions, progress."""

    def __init__(self, events: EventStream, fail: Callable[[str, BaseException], None],
                 note_replicas: Callable[[], None], progress: Callable[[], int]) -> None:
        self.events, self.fail, self.note_replicas, self.progress = events, fail, note_replicas, progress


def check_layout_of(ckpt: Checkpoint, layout: AlignedLayout) -> None:
    """``CheckpointError`` unless ``ckpt`` was saved with ``layout``'s shards and partitions."""
    m = ckpt.manifest
    if m.ranges != tuple(layout.layout.ranges) or m.partitions != layout.partitions:
        raise CheckpointError(
            f"the checkpoint in {ckpt.directory} has {len(m.ranges)} shards over {m.partitions} partition(s); this "
            f"run asks for {layout.layout.n_shards} over {layout.partitions}. Resume with the checkpoint's layout, "
            f"then change it while training with set(shards=..., partitions=...)")


def settings_of(manifest: Manifest) -> dict[str, Any]:
    """The flat settings a checkpoint's run had (``RunConfig.make(**settings_of(m))``), for resuming it."""
    return {**RunConfig.flat_settings({**manifest.config, "algorithm": "downpour"}), "algorithm": "downpour"}
