"""Issue #48, defect 11: the smaller ones, each refused in one line where it was refused for the wrong reason,
failed with exit 1, was accepted or was silently changed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import dbkit
from dbkit.ps import CheckpointError
from dbkit.sim import Cluster as SimCluster


def dbkit_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dbkit", *args], capture_output=True, text=True, timeout=300,
                          env=env)


def test_a_manifest_whose_versions_are_negative_is_refused_as_corrupt(tmp_path):
    from dbkit.ps.checkpoint import Manifest, read_manifest, write_manifest

    write_manifest(tmp_path, Manifest("m", 10, "downpour", 1, ((0, 5), (5, 10)), (-5, 3), {}, 0.0))
    with pytest.raises(CheckpointError, match=r"versions \[-5, 3\] must be one whole number >= 0 per shard"):
        read_manifest(tmp_path)
    write_manifest(tmp_path, Manifest("m", 10, "downpour", 1, ((0, 5), (5, 10)), (3,), {}, 0.0))
    with pytest.raises(CheckpointError, match=r"versions \[3\] must be one whole number >= 0 per shard \(2 shards\)"):
        read_manifest(tmp_path)


@pytest.mark.parametrize("rho", [float("nan"), -1.0, 0.0])
def test_a_history_pair_whose_rho_is_not_positive_is_refused(rho):
    from dbkit.sandblaster.coordinator import CoordinatorState

    d = {"history": [["s0", "y0", 0.5], ["s1", "y1", rho]], "slot": 0, "f": 1.0, "grad_norm": 1.0, "rows": [],
         "evaluations": 0}
    with pytest.raises(ValueError, match=r"history pair 1 \(s1, y1\) has rho .*must be finite and positive"):
        CoordinatorState.from_dict(d)
    d["history"][1][2] = 0.25
    assert CoordinatorState.from_dict(d).history[1].rho == 0.25


def test_a_sandblaster_checkpoint_missing_a_history_vector_is_refused_with_exit_2(tmp_path):
    from dbkit.ps.vector_checkpoint import VectorState, read_vectors, write_vectors

    ck = tmp_path / "ck"
    made = dbkit_cli("run", "sandblaster", "--runtime", "in-process", "--checkpoint-dir", str(ck),
                     "--checkpoint-every", "0.01", "--iterations", "6", "--quiet")
    assert made.returncode == 0, made.stderr
    path = sorted(ck.glob("sandblaster-shard-0-iteration-*.npz"))[-1]
    it = int(path.stem.rsplit("-", 1)[1])
    doc = json.loads((ck / "sandblaster.json").read_text())
    state = read_vectors(path, doc["model"], tuple(doc["ranges"][0]), it)
    history = [name for name in state.vectors if name not in ("params", "grad")]
    assert history  # (6 iterations keep pairs)
    kept = {k: v for k, v in state.vectors.items() if k != history[0]}
    path.unlink()
    write_vectors(ck, VectorState(state.index, state.start, state.stop, it, state.model, kept))
    out = dbkit_cli("run", "sandblaster", "--runtime", "in-process", "--resume", str(ck), "--iterations", "8",
                    "--quiet")
    assert out.returncode == 2, out.stderr
    assert f"lacks the vectors ['{history[0]}']" in out.stderr and out.stderr.count("\n") == 1


def test_backups_as_many_as_replicas_are_refused_not_clamped():
    with pytest.raises(ValueError, match="backups must be below replicas: 2 of 2"):
        dbkit.DownpourSGD("linear", "digits", replica="backup-sync", optimizer="sgd", backups=2, replicas=2,
                          cluster=SimCluster())
    out = dbkit_cli("simulate", "downpour", "--replica", "backup-sync", "--optimizer", "sgd", "--backups", "3",
                    "--replicas", "3", "--steps", "10", "--quiet")
    assert out.returncode == 2 and "give --backups at most 2 or more replicas" in out.stderr


def test_a_runtime_beside_the_machines_given_is_refused():
    from dbkit.runtime import InProcessCluster

    with InProcessCluster(workers=2) as machines:
        with pytest.raises(ValueError, match=r"runtime='dask' and cluster=InProcessCluster\(...\) both say"):
            dbkit.DownpourSGD("linear", "digits", cluster=machines, runtime="dask")
        with pytest.raises(ValueError, match="transport='actor' chooses how replicas reach shards on Dask workers"):
            dbkit.DownpourSGD("linear", "digits", cluster=machines, transport="actor")


def test_the_actor_transport_in_process_is_refused_on_the_command_line():
    out = dbkit_cli("run", "downpour", "--runtime", "in-process", "--transport", "actor", "--steps", "10", "--quiet")
    assert out.returncode == 2 and "in-process workers' replicas call their shards directly" in out.stderr


def test_a_simulated_cluster_given_a_number_says_what_it_takes():
    with pytest.raises(TypeError, match=r"takes a Profile, a profile's name .*give Cluster\(machines=42\)"):
        SimCluster(42)


def test_calibrate_with_an_unwritable_profile_folder_is_refused_before_measuring(tmp_path):
    import os

    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the folder should be: nothing can be made in it
    out = dbkit_cli("calibrate", "--quick", env={**os.environ, "DBKIT_PROFILES": str(blocked / "profiles")})
    assert out.returncode == 2 and "calibrate would write to" in out.stderr
    assert "control plane" not in out.stdout  # nothing was measured


def test_a_raising_loop_on_the_simulator_says_why(tmp_path):
    path = tmp_path / "raising_loop.py"
    path.write_text('''
from dbkit.downpour import DownpourReplica
from dbkit.downpour.replica_kinds import register_replica


@register_replica
class Raising(DownpourReplica):
    name = "raising"

    def step(self):
        raise RuntimeError("boom in step")
''')
    out = dbkit_cli("simulate", "downpour", "--extension", str(path), "--replica", "raising", "--steps", "10",
                    "--quiet")
    assert out.returncode == 1, out.stderr
    assert "the run failed" in out.stderr and "RuntimeError: boom in step" in out.stderr, out.stderr
    assert "see the report" not in out.stderr

