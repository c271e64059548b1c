"""Parameter shards as real Dask actors on a LocalCluster with processes; cleanup."""

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

import dbkit
from dbkit.ps import ParameterShard
from dbkit.runtime.dask import Cluster, ClusterError
from dbkit.runtime.shards import start_shards

from .conftest import leftovers, live_children

pytestmark = pytest.mark.cluster


def _push_many(shards, n):
    """Runs as a task on a worker: a second client of the same shards."""
    g = np.ones(shards.layout.size, np.float32)
    for _ in range(n):
        shards.fetch()
        assert all(a.accepted for a in shards.push(g))
    return n


def test_shards_live_on_different_workers(local_cluster):
    ps = start_shards(local_cluster, np.zeros(10, np.float32), 2, prefix="spread")
    try:
        assert len(set(ps.workers)) == 2
        assert [s.worker for s in ps.figures()] == ps.workers
    finally:
        for i in range(2):
            local_cluster.registry.release(f"spread{i}")


def test_actor_fetch_returns_a_copy(local_cluster):
    ps = start_shards(local_cluster, np.arange(6, dtype=np.float32), 2, prefix="copy")
    a = ps.fetch()
    a[:] = -1.0
    assert np.array_equal(ps.fetch(), np.arange(6, dtype=np.float32))


def test_pushes_from_two_clients_all_land(local_cluster):
    n = 25
    ps = start_shards(local_cluster, np.zeros(8, np.float32), 2, "sgd", 0.5, prefix="two")
    futures = [local_cluster.client.submit(_push_many, ps, n, workers=[w], pure=False)
               for w in local_cluster.workers()]
    assert [f.result() for f in futures] == [n, n]
    figures = ps.figures()
    assert [s.updates for s in figures] == [2 * n, 2 * n]
    assert np.allclose(ps.fetch(), -0.5 * 2 * n)
    assert [s.staleness.count for s in figures] == [2 * n, 2 * n]


def test_refused_push_over_the_wire_changes_nothing(local_cluster):
    ps = start_shards(local_cluster, np.ones(4, np.float32), 1, prefix="refuse")
    before = ps.fetch()
    answers = ps.push(np.array([1.0, np.nan, 0.0, 0.0], np.float32))
    assert not answers[0].accepted
    assert ps.fetch().tobytes() == before.tobytes()
    assert ps.figures()[0].rejected == 1


def test_registry_keeps_actors_alive_after_proxies_are_dropped(local_cluster):
    local_cluster.place_actor("kept", ParameterShard, 0, 0, 3, np.ones(3, np.float32))
    import gc

    gc.collect()
    time.sleep(0.2)
    assert local_cluster.registry.proxy("kept").fetch().result()[0] == 0
    local_cluster.registry.release("kept")
    assert "kept" not in local_cluster.registry.names()


def test_close_is_idempotent_and_stops_workers():
    before = {p.pid for p in live_children()}
    cluster = Cluster(n_workers=1)
    started = [p for p in live_children() if p.pid not in before]
    assert started  # the worker (and its nanny) are real processes
    cluster.close()
    cluster.close()
    assert cluster.closed
    gone, alive = psutil.wait_procs(started, timeout=20)
    assert not alive
    with pytest.raises(ClusterError, match="closed"):
        cluster.place_actor("late", ParameterShard, 0, 0, 1, np.ones(1))


def test_unreachable_scheduler_gives_a_clear_error():
    with pytest.raises(ClusterError, match=r"nothing listens at tcp://127\.0\.0\.1:9 \(connection refused\)"):
        Cluster(scheduler="tcp://127.0.0.1:9", timeout=2)


def test_keyboard_interrupt_stops_every_process(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent("""
        import time
        from dbkit.runtime.dask import Cluster
        if __name__ == "__main__":
            with Cluster(n_workers=2) as c:
                print("READY", flush=True)
                time.sleep(120)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        children = [c for c in psutil.Process(proc.pid).children(recursive=True)
                    if "resource_tracker" not in " ".join(c.cmdline())]
        assert len(children) >= 2
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"left running after Ctrl-C: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()


def test_an_existing_client_is_used_and_left_open(local_cluster):
    with Cluster(client=local_cluster.client) as borrowed:
        assert borrowed.kind == "client"
        ps = start_shards(borrowed, np.ones(4, np.float32), 2, prefix="borrowed")
        assert np.array_equal(ps.fetch(), np.ones(4, np.float32))
        assert len(borrowed.registry) == 2
    assert len(borrowed.registry) == 0  # its own actors were released ...
    assert local_cluster.client.status == "running"  # ... and the client it was given still works
    assert local_cluster.workers()


def test_local_workers_get_the_malloc_settings(local_cluster):
    from dbkit.runtime.dask.worker_processes import WORKER_MALLOC

    env = local_cluster.client.run(lambda: {k: os.environ.get(k) for k in WORKER_MALLOC})
    assert all(v == WORKER_MALLOC for v in env.values())


def test_local_workers_sample_their_profile_every_100ms_and_the_driver_keeps_its_own_config(local_cluster):
    import dask

    from dbkit.runtime.dask.worker_processes import WORKER_DASK_CONFIG

    key = "distributed.worker.profile.interval"
    seen = local_cluster.client.run(lambda: __import__("dask").config.get(key))
    assert set(seen.values()) == {WORKER_DASK_CONFIG[key]} == {"100ms"}
    assert dask.config.get(key) == "10ms"  # set for the workers' start only, not left in the driver


def test_timing_a_roundtrip_and_a_partitioned_step_cleans_up_after_itself(local_cluster):
    from dbkit import nn
    from dbkit.calibration import time_partitioned_step, time_roundtrip

    r = time_roundtrip(local_cluster, 1000, 2, repeats=3)
    assert (r.parameters, r.shards, r.megabytes) == (1000, 2, 0.004)
    assert 0 < r.fetch_ms and 0 < r.push_ms and 0 < r.fetch_plus_push_ms
    with pytest.raises(ValueError, match="shards <= parameters"):
        time_roundtrip(local_cluster, 2, 3)
    step = time_partitioned_step(local_cluster, nn.build("signal-local", 40, 10, filters=4), 2, steps=2)
    assert step.k == 2 and step.step_ms > 0 and step.k1_ms > 0
    assert step.compute_ms is not None and step.compute_ms > 0  # the busiest partition's arithmetic, timed in it
    # each step's arithmetic happens inside it: the median arithmetic is at most the median step, and the rest
    # (the step less its own arithmetic, step by step) is never negative
    assert step.rest_ms is not None and step.rest_ms >= 0 and step.compute_ms <= step.step_ms
    assert step.bytes_per_step == step.min_bytes_per_step > 0  # what crossed = what the connectivity needs
    with pytest.raises(ValueError, match="k must be in"):
        time_partitioned_step(local_cluster, nn.build("linear", 4, 2), 3)
    gc.collect()  # dask's actor proxies sit in reference cycles: they let their actors go at the next collection
    assert leftovers(local_cluster, "timing") == {}


def test_host_probes_time_a_workers_arithmetic_and_a_boundary_hop_and_clean_up(local_cluster):
    from dbkit.calibration.host_probes import measure
    from dbkit.emulate.profile import probe_seconds

    probes = measure(local_cluster, reps=1, rounds=1)
    assert probes.dense_seconds > 0 and probes.local_seconds > 0 and probes.hop_seconds > 0
    # the local probe does more arithmetic (10.8 against 8.5 Mflop an example) at a far slower rate: its
    # gradient takes longer in the worker, as in this process
    assert probes.local_seconds > probes.dense_seconds
    # the small probes do a part of the first layer's arithmetic (1/8 dense, 1/7 local): they take less time
    assert probes.dense_small_seconds is not None and 0 < probes.dense_small_seconds < probes.dense_seconds
    assert probes.local_small_seconds is not None and 0 < probes.local_small_seconds < probes.local_seconds
    # a step's own work in one partition: the dense probe's (2.1 million parameters' gradient gathered, and
    # the same layers' thread hops) beyond the 8-8-2 network's (next to no parameters)
    assert probes.step_rest_seconds is not None and probes.dense_rest_seconds is not None
    assert 0 < probes.step_rest_seconds < probes.dense_rest_seconds
    # the bulk probe's boundary, a mebibyte each way and four messages on the critical path, costs more than
    # one 8-float boundary message's hop
    assert probes.bulk_exchange_seconds is not None and probes.bulk_exchange_seconds > probes.hop_seconds
    assert probe_seconds("local", 1) > probe_seconds("dense", 1)
    gc.collect()
    assert leftovers(local_cluster, "timing") == {}


def test_the_local_dashboard_and_every_wire_listen_on_loopback_only(local_cluster):
    """Nothing the LocalCluster opens is reachable from another machine: the dashboard and the shard
    wires listen on 127.0.0.1, not on every interface."""
    import psutil

    port = local_cluster.client.scheduler_info()["services"]["dashboard"]
    listening = [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening)
    wires = local_cluster.wires.addresses(local_cluster.workers())
    assert wires and all(w is not None and w.host == "127.0.0.1" for w in wires.values())
    for w in wires.values():
        bound = [c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == w.port]
        assert bound and all(c.laddr.ip == "127.0.0.1" for c in bound)


def test_workers_started_here_survive_a_sigint_that_the_driver_handles(local_cluster):
    """A terminal sends Ctrl-C to the whole process group; the workers must not die of it before the driver
    has stopped the job and written its report (they start with SIGINT ignored)."""
    import os
    import signal
    import time

    before = local_cluster.client.run(os.getpid)
    for pid in before.values():
        os.kill(pid, signal.SIGINT)
    time.sleep(1.0)
    assert local_cluster.client.run(os.getpid) == before
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the driver's own handler is back


def test_a_job_pinned_to_a_worker_not_in_the_cluster_is_refused_at_once_and_leaves_nothing(local_cluster):
    """Issue #21, 6: Dask keeps an actor pinned to an unknown worker waiting for ever; placement asks first,
    and every placement is bounded (``place_timeout``)."""
    from dbkit.data import load

    data = load("digits")
    for pin in ({"replica_workers": ["tcp://127.0.0.1:1"]}, {"shard_workers": ["tcp://127.0.0.1:1"]}):
        job = dbkit.DownpourSGD("mlp", data, client=local_cluster.client, **pin)
        with pytest.raises(ClusterError, match=r"no worker tcp://127\.0\.0\.1:1 in the cluster \(its workers: tcp://"):
            job.fit(steps=20, progress=False)
        job.stop()  # returns: nothing is left to wait for
        assert leftovers(local_cluster, job.tag) == {}
    with pytest.raises(ValueError, match="place_timeout must be > 0"):
        Cluster(client=local_cluster.client, place_timeout=0)


def test_a_job_on_a_closed_cluster_names_it_and_says_how_to_get_a_new_one():
    """A notebook closed its cluster, then pressed Start (or ran an exercise): the error names the
    scheduler the closed client was on and what to do, not "at ?" (issue #44)."""
    cluster = Cluster(n_workers=1)
    address = cluster.scheduler_address
    cluster.close()
    for make in (lambda: dbkit.DownpourSGD("linear", "signals", client=cluster.client, replicas=1, shards=1),
                 lambda: dbkit.SyncSGD("linear", "signals", client=cluster.client, on_cluster=True)):
        job = make()
        with pytest.raises(ClusterError) as caught:
            job.start()
        message = str(caught.value)
        assert "at ?" not in message and address in message and "was closed" in message, message
        assert "dbkit.Cluster()" in message
        assert job.state == "created"
        job.stop()
