"""Issue #24: synchronous SGD with backup workers (Chen et al. 2016) as a registered replica loop: with no
backups it is synchronous SGD; with one, a straggler's gradients are dropped and the rounds go at the pace of
the fast replicas."""

import threading

import numpy as np
import pytest

import dbkit
from dbkit.after.backup_sync import BackupSyncReplica
from dbkit.config import RunConfig
from dbkit.ps import local_shards
from dbkit.runtime import InProcessCluster

from .after_rig import NET, PushOrder, batches, replica

LR = 0.1


def _replica(i: int, server, backups: int) -> BackupSyncReplica:
    return replica(BackupSyncReplica, i, server, LR, backups=backups)


def _in_threads(replicas, steps: int) -> None:
    for r in replicas:  # each counted among the live before any round starts, as a job's replicas nearly are
        r.coordinator.tick(r.label, 0)
        r.joined = True
    threads = [threading.Thread(target=lambda r=r: [r.step() for _ in range(steps)], daemon=True) for r in replicas]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a round never ended"


def test_with_no_backups_every_round_is_a_synchronous_sgd_step_on_the_mean_gradient():
    # bit for bit: the reference takes all three gradients at the same parameters and applies each third of
    # the mean's step in the order the pushes came (one lock makes each push whole on both shards)
    start = NET.init_params(0)
    server = local_shards(start, 2, "sgd", LR)
    order = PushOrder()
    replicas = [replica(BackupSyncReplica, i, server, LR, own=order.client(server, f"replica{i}"), backups=0)
                for i in range(3)]
    _in_threads(replicas, 5)
    p, draws = start.copy(), [batches(i) for i in range(3)]
    for c in range(5):
        came = order.names[3 * c : 3 * c + 3]
        assert sorted(came) == ["replica0", "replica1", "replica2"]  # a round's pushes, then the next's
        grads = {f"replica{i}": NET.loss_and_grad(p, *next(b))[1] * np.float32(1.0 / 3) for i, b in enumerate(draws)}
        for name in came:
            p -= np.float32(LR) * grads[name]
    assert np.array_equal(server.fetch(), p)
    assert [s.figures().version for s in server.shards] == [15, 15] and all(r.late == 0 for r in replicas)


def test_a_round_a_replica_missed_while_it_left_goes_on_without_it():
    server = local_shards(NET.init_params(0), 2, "sgd", LR)
    a, b = _replica(0, server, backups=0), _replica(1, server, backups=0)
    _in_threads([a, b], 2)
    b.flush()  # b pauses: it leaves, and the rounds need one gradient fewer
    done = threading.Event()
    threading.Thread(target=lambda: ([a.step() for _ in range(3)], done.set()), daemon=True).start()
    assert done.wait(20), "a waited for a replica that had left"
    assert [s.figures().version for s in server.shards] == [4 + 3, 4 + 3]


def test_with_one_backup_a_straggler_is_dropped_and_the_rounds_go_at_the_fast_replicas_pace():
    figures = {}
    for backups in (1, 0):
        with InProcessCluster(2) as m, dbkit.DownpourSGD("mlp", "digits", cluster=m, replicas=3, shards=2,
                                                         replica="backup-sync", backups=backups, optimizer="sgd",
                                                         lr=0.1, slow_replicas={0: 10.0}) as job:
            job.fit(steps=240, progress=False)
        report = job.report()
        figures[backups] = ({r["replica"]: (r["steps"], r["pushes"]) for r in report["replicas"]},
                            report["shards"][0]["updates"])
        assert report["config"]["replica_loop"] == {"name": "backup-sync", "settings": {"backups": backups}}
    (replicas, updates), (sync_replicas, _) = figures[1], figures[0]
    slow_steps, slow_pushes = replicas[0]
    fast = [replicas[i] for i in (1, 2)]
    assert slow_pushes <= slow_steps // 2  # most of the straggler's gradients came too late and were dropped
    assert all(steps - pushes <= steps // 4 for steps, pushes in fast)  # the fast ones' nearly all counted
    # each round applies N - b = 2 gradients, and goes at the fast replicas' pace: about a round per fast step
    # (a replica dropped in a round it came late to skips to the current one; the first rounds, before every
    # replica has joined, need fewer)
    rounds, most = updates / 2, max(s for s, _ in fast)
    assert 0.8 * most - 2 <= rounds <= 1.2 * most + 2
    assert most > 3 * slow_steps  # they did not wait for the straggler
    assert max(s for s, _ in (sync_replicas[1], sync_replicas[2])) <= 1.2 * sync_replicas[0][0] + 3  # b = 0: they did


def test_backup_sync_settings_are_checked():
    c = RunConfig.make(algorithm="downpour", replica="backup-sync", backups=2)
    assert c.replica_settings() == {"backups": 2}
    with pytest.raises(ValueError, match="meant for optimizer 'sgd'"):
        c.replace(optimizer="adagrad")
    with pytest.raises(ValueError, match="backups must be a whole number"):
        c.replace(backups=-1)


@pytest.mark.parametrize("loop, knobs", [("backup-sync", dict(backups=1, optimizer="sgd")),
                                         ("ssp", dict(max_staleness=1, optimizer="adagrad"))])
def test_the_loops_that_wait_for_each_other_run_in_virtual_time_on_a_simulated_cluster(loop, knobs):
    # their waits are the runtime's: a simulated replica waits in virtual time, asking shard 0 as on Dask
    from dbkit.sim import Cluster

    with dbkit.DownpourSGD("linear", "digits", cluster=Cluster(), replicas=3, replica=loop, lr=0.05,
                           slow_replicas={0: 4.0}, **knobs) as job:
        job.fit(steps=150, progress=False)
    report = job.report()
    assert report["simulated"] and report["state"] == "stopped"
    assert report["config"]["replica_loop"]["name"] == loop
    assert sum(r["steps"] for r in report["replicas"]) >= 150 and all(r["pushes"] > 0 for r in report["replicas"])
    assert report["final"]["test_accuracy"] > 0.5
