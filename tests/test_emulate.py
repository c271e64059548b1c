"""The emulated cluster (``dbkit.emulate``): real namespaces, shaped links, CPU groups, a real ``dask scheduler``
and ``dask worker`` per host on 198.18.0.0/24, and dbkit running across them. Skipped, with the reason, where
this machine cannot build one (CI here runs as root and runs them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dbkit.cli.main import main
from dbkit.emulate import (
    Cluster,
    ClusterSpec,
    ClusterUp,
    cpu_groups,
    leftovers,
    links,
    missing,
    parse_rate,
    running,
    tear_down,
    up_now,
)
from dbkit.jobs.heartbeat import Heartbeat

WHY = missing()
needs_emulation = pytest.mark.skipif(WHY is not None, reason=WHY or "")


def test_rates_and_settings_are_checked():
    assert parse_rate("100mbit") == 100_000_000
    assert parse_rate("1gbit") == 10**9
    assert parse_rate("12mbps") == 96_000_000  # bytes, as tc spells them
    assert parse_rate(2e6) == 2_000_000
    for bad in ("10furlongs", "mbit", "-5mbit", "1kbit", True):
        with pytest.raises(ValueError):
            parse_rate(bad)
    for kwargs in ({"hosts": 0}, {"hosts": 2.5}, {"cpu": 0.0}, {"link": "fast"}, {"threads": 0}):
        with pytest.raises(ValueError):
            ClusterSpec(**kwargs)  # type: ignore[arg-type]
    # a host's BLAS gets the cores its share amounts to
    assert [ClusterSpec(cpu=c).blas_threads for c in (0.25, 1.0, 1.5, 4, None)] == [1, 1, 2, 4, 1]


def test_without_root_it_says_so_in_one_line_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in (missing() or "")
    assert main(["emulate", "up", "--hosts", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "root" in err


def _qdisc_rate(ipr, ifname: str) -> int:
    index = ipr.link_lookup(ifname=ifname)[0]
    for q in ipr.get_qdiscs(index=index):
        if q.get_attr("TCA_KIND") == "tbf":
            return q.get_nested("TCA_OPTIONS", "TCA_TBF_PARMS")["rate"] * 8
    raise AssertionError(f"no token bucket on {ifname}")


def _blas_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


@needs_emulation
def test_hosts_links_and_cpu_groups_are_built_and_removed():
    from pyroute2 import IPRoute, NetNS

    with Cluster(hosts=2, link="50mbit", cpu=0.5) as cluster:
        state = cluster.state
        assert state is not None and state.hosts == ["198.18.0.1", "198.18.0.2"]
        assert cluster.address == "tcp://198.18.0.254:8786"
        with IPRoute() as ipr:  # both directions shaped: the bridge's end and the host's own
            assert _qdisc_rate(ipr, "dbkit-v1") == 50_000_000
        ns = NetNS("dbkit-h2")
        try:
            assert _qdisc_rate(ns, "eth0") == 50_000_000
            addresses = [a.get_attr("IFA_ADDRESS") for a in ns.get_addr(family=2)]
            assert "198.18.0.2" in addresses
        finally:
            ns.close()
        version, root = cpu_groups._root()

        def kernels_share(group: str) -> float:  # the kernel's own record: quota over period
            if version == 1:
                return int((root / group / "cpu.cfs_quota_us").read_text()) / int(
                    (root / group / "cpu.cfs_period_us").read_text())
            quota, period = (root / group / "cpu.max").read_text().split()
            return int(quota) / int(period)

        assert kernels_share("dbkit-h1") == kernels_share("dbkit-h2") == 0.5
        worker = state.pids["host-1"]
        assert worker in cpu_groups.pids("dbkit-h1")  # the worker runs under its host's CPU share
        cluster.set_cpu(2, 0.125)  # a straggler: host 2 slowed, host 1 as it was, both workers running on
        assert kernels_share("dbkit-h2") == 0.125 and kernels_share("dbkit-h1") == 0.5
        assert cpu_groups.share("dbkit-h2") == 0.125
        with pytest.raises(ValueError, match="1..2"):
            cluster.set_cpu(3, 0.1)
        with pytest.raises(ValueError, match="0.01 to 64"):
            cluster.set_cpu(1, 0.0)
        assert running(state.pids["host-2"]) and state.pids["host-2"] in cpu_groups.pids("dbkit-h2")
        from distributed import Client

        with Client(cluster.address, timeout=10) as client:
            seen = sorted(w.split("//")[1].split(":")[0] for w in client.scheduler_info()["workers"])
            blas = client.run(_blas_threads)
        assert seen == ["198.18.0.1", "198.18.0.2"]
        # half a core is one core's worth of BLAS threads: a second would spin on the host's quota
        assert sorted(blas.values()) == [[1], [1]]
        pids = list(state.pids.values())
    assert leftovers() == []
    assert not any(running(p) for p in pids)


@needs_emulation
def test_a_link_taken_down_cuts_the_host_off_and_up_again_restores_it():
    with Cluster(hosts=2, link="100mbit", cpu=0.5) as cluster:
        probe = [sys.executable, "-c", "import socket; socket.create_connection(('198.18.0.254', 8786), 2)"]

        def reaches() -> bool:
            on_host_1 = [sys.executable, "-m", "dbkit.emulate.enter", "dbkit-h1", "dbkit-h1", "--"]
            return subprocess.run([*on_host_1, *probe], capture_output=True, timeout=30).returncode == 0

        def unresolved() -> list[str]:  # the host's address lookups left unanswered (INCOMPLETE or FAILED)
            from pyroute2 import NetNS

            with NetNS("dbkit-h1") as ns:
                return [n.get_attr("NDA_DST") for n in ns.get_neighbours() if n["state"] in (0x01, 0x20)]

        assert reaches()
        cluster.set_link(1, up=False)
        assert not reaches()
        assert unresolved() == ["198.18.0.254"]  # the failed connect's lookup, still pending or failed
        cluster.set_link(1, up=True)
        # a lookup left over from the cut would fail the next connect with "No route to host" (CI, once in 5)
        assert unresolved() == []
        assert reaches()


@needs_emulation
def test_downpour_and_sandblaster_run_across_four_hosts_from_the_command_line(tmp_path: Path):
    def run(*args: str) -> dict:
        report = tmp_path / f"{args[0]}.json"
        done = subprocess.run([sys.executable, "-m", "dbkit", "run", *args, "--scheduler", cluster.address,
                               "--dataset", "digits", "--model", "mlp", "--shards", "2", "--report", str(report),
                               "--quiet"], capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(report.read_text())

    with Cluster(hosts=4, link="100mbit", cpu=0.5) as cluster:
        downpour = run("downpour", "--replicas", "2", "--steps", "200")
        sandblaster = run("sandblaster", "--replicas", "3", "--seconds", "8")
    for r in (downpour, sandblaster):
        shard_hosts = {s["worker"].split("//")[1].split(":")[0] for s in r["shards"]}
        assert len(shard_hosts) == 2 and all(h.startswith("198.18.0.") for h in shard_hosts)
        assert r["final"]["test_accuracy"] > 0.5  # ten classes: chance is 0.1
    computed_on = {x["worker"].split("//")[1].split(":")[0] for x in sandblaster["replicas"] if x["steps"] > 0}
    assert len(computed_on) >= 2  # work units computed on more than one host
    assert leftovers() == []


@needs_emulation
def test_the_command_line_keeps_a_cluster_between_commands_and_a_crashed_one_is_cleared():
    def dbkit(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dbkit", "emulate", *args], capture_output=True, text=True,
                              timeout=180)

    try:
        up = dbkit("up", "--hosts", "2", "--cpu", "0.5")
        assert up.returncode == 0, up.stderr
        assert "tcp://198.18.0.254:8786" in up.stdout
        status = dbkit("status")
        assert status.stdout.count("running") == 3 and "NOT RUNNING" not in status.stdout
        # a second cluster is refused, in Python and on the command line, and the first keeps running
        with pytest.raises(ClusterUp, match="already up"):
            Cluster(hosts=1).start()
        second = dbkit("up", "--hosts", "1")
        assert second.returncode == 2 and "already up" in second.stderr
        assert dbkit("status").stdout.count("running") == 3
        # a crash leaves everything behind; the next up clears it and builds afresh
        links.remove()
        again = dbkit("up", "--hosts", "1", "--cpu", "0.5")
        assert again.returncode == 0, again.stderr
        assert "1 hosts" in again.stdout
    finally:
        down = dbkit("down")
    assert down.returncode == 0
    assert leftovers() == []
    assert "no emulated cluster is up" in dbkit("status").stdout


@needs_emulation
def test_a_cluster_started_from_python_is_removed_when_its_interpreter_exits_without_closing_it():
    # a notebook's kernel that ends (or a script that forgets close()) takes its hosts with it
    code = ("from dbkit.emulate import Cluster, up_now\n"
            "c = Cluster(hosts=1, cpu=0.5).start()\n"
            "assert up_now() is not None\n"
            "print('up at', c.address)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "up at tcp://198.18.0.254:8786" in done.stdout, done.stderr
    assert leftovers() == [] and up_now() is None


@needs_emulation
def test_a_cluster_whose_owner_is_killed_is_removed_by_its_reaper_and_a_detached_one_is_not():
    # Jupyter SIGKILLs a kernel that takes more than a few seconds to shut down: no exit hook runs then
    code = ("import sys, time\n"
            "from dbkit.emulate import Cluster\n"
            "c = Cluster(hosts=2, cpu=0.5).start()\n"
            "print('up', flush=True)\n"
            "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "up"
        state = up_now()
        assert state is not None and state.reaper > 0 and running(state.reaper)
        owner.kill()
        owner.wait(timeout=30)
        deadline = time.monotonic() + 60
        while leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert leftovers() == [] and up_now() is None
        assert not running(state.pids["scheduler"]) and not any(running(p) for p in state.pids.values())
    finally:
        owner.kill()
        tear_down()
    # a detached cluster (dbkit emulate up) outlives its maker, so it has no reaper
    detached = subprocess.run([sys.executable, "-c", "from dbkit.emulate import Cluster\n"
                               "Cluster(hosts=1, cpu=0.5).start().detach()\n"], timeout=180)
    try:
        assert detached.returncode == 0
        time.sleep(1.0)  # a reaper, had one been left, would have removed it by now
        state = up_now()
        assert state is not None and state.reaper == 0
    finally:
        tear_down()
    assert leftovers() == []


@needs_emulation
def test_replicas_reach_the_shards_wires_from_their_own_hosts_and_partitions_talk_across_hosts():
    from distributed import Client

    import dbkit

    def wire_peers(dask_worker) -> dict[str, int]:  # noqa: ANN001 - on each worker: what its shard wire served
        found: dict[str, int] = {}
        for name, plugin in dask_worker.plugins.items():
            if name.startswith("dbkit-shard-wire") and getattr(plugin, "server", None) is not None:
                found.update(plugin.server.peers)
        return found

    with Cluster(hosts=4, link="100mbit", cpu=0.5) as emulated, Client(emulated.address) as client:
        workers = sorted(client.scheduler_info()["workers"])
        shard_workers, replica_workers = workers[:2], workers[2:]
        with dbkit.DownpourSGD("mlp", "digits", client=client, replicas=2, shards=2,
                               shard_workers=shard_workers, replica_workers=replica_workers) as job:
            job.fit(steps=60, progress=False)
            peers = client.run(wire_peers)
        with dbkit.DownpourSGD("image-local", "digits", client=client, replicas=1, shards=2, partitions=2,
                               shard_workers=shard_workers) as split:
            split.fit(steps=20, progress=False)
            rows = split.report()["replicas"][0]["partitions"]

    def host(address: str) -> str:
        return address.split("//")[-1].split(":")[0]

    # each shard's wire was reached by both replicas, from their own hosts' addresses (not loopback, not its own)
    for w in shard_workers:
        assert set(peers[w]) == {host(r) for r in replica_workers}, peers
    # a partitioned replica's two halves on two hosts, their boundary traffic over the partition wire between them
    assert len({host(p["worker"]) for p in rows}) == 2
    assert all(p["bytes_sent"] > 0 for p in rows)
    assert leftovers() == []


@needs_emulation
def test_one_replica_ends_with_the_same_parameters_on_emulated_hosts_as_on_a_local_cluster(local_cluster):
    """Arithmetic is arithmetic: with one replica (no order of pushes to differ), the job on two emulated hosts
    (replica on one, shards on the other, every byte over a shaped link) ends bit for bit where the same job
    on a LocalCluster ends."""
    from distributed import Client

    import dbkit
    from dbkit.config import RunConfig

    cfg = RunConfig.make(algorithm="downpour", lr=0.05, optimizer="adagrad", replicas=1, shards=2, overlap=False)
    params = {}
    with dbkit.DownpourSGD("mlp", "digits", config=cfg, client=local_cluster.client) as job:
        job.fit(steps=60, progress=False)
        params["local"] = job.parameters()
    with Cluster(hosts=2, link="100mbit", cpu=0.5) as emulated, Client(emulated.address) as client:
        workers = sorted(client.scheduler_info()["workers"])
        with dbkit.DownpourSGD("mlp", "digits", config=cfg, client=client, shard_workers=workers[:1],
                               replica_workers=workers[1:]) as job:
            job.fit(steps=60, progress=False)
            params["emulated"] = job.parameters()
            shard_hosts = {row["worker"].split("//")[-1].split(":")[0] for row in job.report()["shards"]}
    assert shard_hosts == {"198.18.0.1"}  # the shards on host 1, the replica on host 2: every step crossed a link
    assert params["emulated"].tobytes() == params["local"].tobytes()
    assert not np.allclose(params["local"], dbkit.nn.build("mlp", 64, 10).init_params(0))  # it trained
    assert leftovers() == []


HEARTBEAT_PERIOD = Heartbeat(timeout=20.0).period  # a ping goes out once a period


def _run_with_a_cut(tmp_path: Path, host: int | tuple[int, ...], down_for: float | None, seconds: float = 24.0,
                    heartbeat_timeout: float = 10.0):
    """A Downpour job on 4 emulated hosts (shards on hosts 1 and 2, replicas on 3 and 4, checkpoints every
    second to a folder every host sees) whose host ``host`` (or hosts) loses its link 6 s in, for ``down_for``
    seconds (``None``: for good). Returns the report and, for a cut that ends, replica 0's steps when the link
    came back (``seen["steps"]``), and the job's clock just before it did (``seen["up_at"]``)."""
    import threading

    from distributed import Client

    import dbkit

    seen: dict[str, float] = {}
    with Cluster(hosts=4, link="100mbit", cpu=0.5) as emulated, Client(emulated.address) as client:
        workers = sorted(client.scheduler_info()["workers"])
        with dbkit.DownpourSGD("mlp", "digits", client=client, replicas=2, shards=2, shard_workers=workers[:2],
                               replica_workers=workers[2:], checkpoint_dir=str(tmp_path / "ck"),
                               checkpoint_every=1.0, heartbeat_timeout=heartbeat_timeout) as job:

            hosts = (host,) if isinstance(host, int) else host

            def cut() -> None:
                time.sleep(6)
                for k in hosts:
                    emulated.set_link(k, up=False)
                if down_for is not None:
                    time.sleep(down_for)
                    seen["up_at"] = job.snapshot().t  # the job's clock just before the link comes back
                    for k in hosts:
                        emulated.set_link(k, up=True)
                    seen["steps"] = next(r.steps for r in job.snapshot().replicas if r.replica == 0)

            cutter = threading.Thread(target=cut, daemon=True)
            cutter.start()
            job.fit(seconds=seconds, progress=False)
            cutter.join(timeout=30)
            report = job.report()
    assert leftovers() == []
    return report, seen


@needs_emulation
def test_a_shards_host_cut_off_for_good_comes_back_from_its_checkpoint(tmp_path: Path):
    report, _ = _run_with_a_cut(tmp_path, host=1, down_for=None)
    faults = report["faults"]
    assert [w["worker"].split("//")[1].split(":")[0] for w in faults["workers_hung"]] == ["198.18.0.1"]
    assert faults["shards_lost"] == faults["shards_restored"] == 1
    restore = faults["restores"][0]
    assert restore["shard"] == 0 and "198.18.0.1" not in restore["restored_on"]
    # nothing lost past the last checkpoint: exactly the updates since it
    assert restore["updates_lost"] == restore["version_read"] - restore["checkpoint_version"] == faults["updates_lost"]
    assert report["state"] != "failed" and report["final"]["test_accuracy"] > 0.5


@needs_emulation
def test_a_replicas_host_partitioned_for_ten_seconds_is_noticed_kept_and_goes_on_where_it_stopped(tmp_path: Path):
    """A 10 s network partition shorter than the heartbeat's timeout (20 s here): the job notices (the report
    says which host was silent and for how long), keeps the host, and its replica steps on from where it was;
    nothing is lost. (Cut for good, or past the timeout, a host is dropped: the test above.)"""
    report, seen = _run_with_a_cut(tmp_path, host=3, down_for=10.0, seconds=30.0, heartbeat_timeout=20.0)
    steps_at_return = seen.get("steps")
    faults = report["faults"]
    assert faults["shards_lost"] == faults["replicas_lost"] == faults["updates_lost"] == 0
    assert faults["workers_hung"] == []
    silent = {w["worker"].split("//")[1].split(":")[0]: w for w in faults["workers_silent"]}
    assert set(silent) == {"198.18.0.3"}, faults["workers_silent"]
    # away as long as the cut, less up to one heartbeat period (the first unanswered ping may leave up to a period
    # after the cut began: 9.50 s in one run), and less than the timeout
    assert 10.0 - HEARTBEAT_PERIOD <= silent["198.18.0.3"]["silent"] < 20.0
    # noticed when it answered again, after the cut ended (on the job's clock, which starts after the cut's
    # timer: 15.53 s in one run for a cut 6 s + 10 s after that timer)
    assert silent["198.18.0.3"]["t"] >= seen["up_at"]
    first = next(r for r in report["replicas"] if r["replica"] == 0)
    assert first["worker"].split("//")[1].startswith("198.18.0.3:")
    assert steps_at_return is not None and first["steps"] > steps_at_return  # it stepped again once reconnected
    assert report["state"] != "failed"


@needs_emulation
def test_every_host_partitioned_for_ten_seconds_at_once_is_survived_with_nothing_lost(tmp_path: Path):
    """All 4 hosts (both shards' and both replicas') cut off together for 10 s, under a 20 s heartbeat: the
    job keeps them all, loses no update and no replica, and the report gives each host's time away (cut to
    answering again: the job's time to recover); the replicas step on after it."""
    report, seen = _run_with_a_cut(tmp_path, host=(1, 2, 3, 4), down_for=10.0, seconds=30.0, heartbeat_timeout=20.0)
    steps_at_return = seen.get("steps")
    faults = report["faults"]
    assert faults["shards_lost"] == faults["replicas_lost"] == faults["updates_lost"] == 0
    assert faults["workers_hung"] == [] and faults["restores"] == []
    silent = {w["worker"].split("//")[1].split(":")[0]: w["silent"] for w in faults["workers_silent"]}
    assert set(silent) == {f"198.18.0.{k}" for k in (1, 2, 3, 4)}, faults["workers_silent"]
    assert all(10.0 - HEARTBEAT_PERIOD <= away < 20.0 for away in silent.values()), silent
    first = next(r for r in report["replicas"] if r["replica"] == 0)
    assert steps_at_return is not None and first["steps"] > steps_at_return
    assert report["state"] != "failed"


def test_the_emulated_clusters_profile_is_here_with_its_links_and_its_measured_arithmetic():
    from dbkit.emulate.profile import emulated_profile, predicted_gradient_seconds
    from dbkit.nn import build
    from dbkit.sim import CostModel, ModelShape, load_profile

    here = load_profile("here")
    p = emulated_profile(ClusterSpec(hosts=8, link="100mbit", cpu=0.25), measured_seconds=0.05)
    assert p.machine.bandwidth == 100e6 / 8 and p.machine.cores == 1 and p.machine.machines == 8
    assert p.machine.host_cores == 0  # every host a machine of its own
    assert p.machine.shared_links == 1  # flows through one link share it, as TCP's do
    # the probe's gradient now costs what was measured on a host, times what a worker's threads add
    fixed, parallel = CostModel(p, ModelShape.of(build("speech", 440, 64))).gradient_parts(32)
    assert (fixed + parallel) * p.machine.cpu_factor == pytest.approx(0.05 * here.machine.cpu_factor)
    assert predicted_gradient_seconds(here) == pytest.approx(fixed + parallel)
    assert p.compute == here.compute and p.shard == here.shard and p.message == here.message
    assert "100mbit" in p.name and p.measured["emulated_gradient_seconds"] == 0.05
    for bad in (0.0, -1.0, float("nan"), 100.0):
        with pytest.raises(ValueError):
            emulated_profile(ClusterSpec(), measured_seconds=bad)


def test_probes_measured_in_a_hosts_worker_set_its_arithmetic_rates_and_boundary_message_and_nothing_else():
    from dbkit import nn
    from dbkit.emulate.profile import LINK_LATENCY, HostProbes, emulated_profile, probe_network
    from dbkit.runtime.sim.partitioned_step import partitioned_step
    from dbkit.sim import CostModel, ModelShape

    spec = ClusterSpec(hosts=8, link="1gbit", cpu=0.25)
    plain = emulated_profile(spec, measured_seconds=0.05)
    probes = HostProbes(dense_seconds=0.03, local_seconds=0.4, hop_seconds=0.002)
    p = emulated_profile(spec, measured_seconds=0.05, probes=probes)

    def charged(profile, model: str) -> float:  # noqa: ANN001
        fixed, parallel = CostModel(profile, ModelShape.of(probe_network(model))).gradient_parts(32)
        return (fixed + parallel) * profile.machine.cpu_factor

    # each probe's gradient now costs what was measured in the worker (no worker factor on top)
    assert charged(p, "dense") == pytest.approx(0.03) and charged(p, "local") == pytest.approx(0.4)
    assert charged(plain, "dense") != pytest.approx(0.03)
    # the speech preset keeps its own measured line: Downpour's charge is unchanged
    assert charged(p, "speech") == pytest.approx(charged(plain, "speech"))
    assert p.machine == plain.machine and p.shard == plain.shard
    assert p.measured["emulated_host_probes"]["hop_seconds"] == 0.002
    # the hop probe's own network, split in two: the simulator's four boundary messages each cost the hop
    tiny = ModelShape.of(nn.Network([nn.Dense(8, 8), nn.ReLU(8), nn.Dense(8, 2)]))
    step = partitioned_step(p, tiny, 2, 32, bands=True)
    assert step.exchange == pytest.approx(4 * probes.hop_seconds, rel=0.01)
    assert p.message.partition_message_seconds * p.machine.cpu_factor == pytest.approx(0.002 - LINK_LATENCY)
    for bad in ({"dense_seconds": 0.0}, {"local_seconds": float("nan")}, {"hop_seconds": True}):
        with pytest.raises(ValueError):
            HostProbes(**{"dense_seconds": 0.03, "local_seconds": 0.4, "hop_seconds": 0.002, **bad})
    with pytest.raises(ValueError, match="leaves nothing"):  # 1 us cannot hold the probe's fixed work
        emulated_profile(spec, measured_seconds=0.05, probes=HostProbes(1e-6, 0.4, 0.002))


def test_small_probes_make_the_rate_depend_on_the_working_set_between_what_the_two_probes_measured():
    from dbkit.emulate.profile import HostProbes, emulated_profile, probe_network, probe_working_set
    from dbkit.sim import CostModel, ModelShape

    spec = ClusterSpec(hosts=8, link="1gbit", cpu=0.25)
    # the small dense probe has 1/8 of the arithmetic; measured at 1/10 of the time: it ran faster per flop
    p = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, dense_small_seconds=0.03 / 10,
                                                       local_small_seconds=0.4 / 6))
    c = p.compute
    assert 0 < c.dense_working_set_exponent <= 1
    big, small = probe_working_set("dense"), probe_working_set("dense-small")
    assert (c.dense_working_set_bytes, c.dense_working_set_floor_bytes) == (big, small)
    assert c.rate("dense", big) == c.dense_flops_per_second
    # at the small probe's own working set, the rate is the one its measured time gives (as the big one's)
    at_small = p.but(compute={"dense_flops_per_second": c.rate("dense", small), "dense_working_set_exponent": 0.0})
    fixed, parallel = CostModel(at_small, ModelShape.of(probe_network("dense-small"))).gradient_parts(32)
    assert (fixed + parallel) * p.machine.cpu_factor == pytest.approx(0.03 / 10, rel=1e-6)
    # the local probe's 4 of 28 rows at 1/6 of the time: slower per flop: no exponent, not a negative one
    assert c.local_working_set_exponent == 0.0
    assert "working_set" in " ".join(p.comments)
    plain = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002))
    assert plain.compute.dense_working_set_exponent == 0.0 and plain.compute.rate("dense", 1.0) == \
        plain.compute.dense_flops_per_second
    with pytest.raises(ValueError, match="dense_small_seconds"):
        HostProbes(0.03, 0.4, 0.002, dense_small_seconds=float("nan"))


def test_a_steps_own_work_measured_in_one_partition_is_what_the_simulator_charges_beyond_its_arithmetic():
    from dbkit.calibration.host_probes import tiny_network
    from dbkit.emulate.profile import HostProbes, emulated_profile, probe_network
    from dbkit.runtime.sim.partitioned_step import partitioned_step
    from dbkit.sim import ModelShape

    spec = ClusterSpec(hosts=8, link="1gbit", cpu=0.25)
    p = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, step_rest_seconds=0.004,
                                                       dense_rest_seconds=0.024))
    arithmetic_only = p.but(compute={"layer_seconds": 0.0, "step_seconds": 0.0, "gather_seconds_per_parameter": 0.0})

    def rest(net, k: int = 1) -> float:  # noqa: ANN001
        shape = ModelShape.of(net)
        return (partitioned_step(p, shape, k, 32, bands=True, update=False).compute
                - partitioned_step(arithmetic_only, shape, k, 32, bands=True, update=False).compute)

    assert rest(tiny_network()) == pytest.approx(0.004, rel=1e-3)
    assert rest(probe_network("dense")) == pytest.approx(0.024, rel=1e-3)
    # in 4 partitions each gathers a quarter of the gradient; the layers' own work stays
    assert rest(probe_network("dense"), 4) == pytest.approx(0.004 + 0.020 / 4, rel=0.01)
    assert "gather_seconds_per_parameter" in " ".join(p.comments)
    with pytest.raises(ValueError, match="go together"):
        HostProbes(0.03, 0.4, 0.002, step_rest_seconds=0.004)


def test_the_probes_exchanges_beyond_their_link_time_become_an_exchanges_a_messages_and_a_bytes_cost():
    from dbkit.emulate.profile import HostProbes, emulated_profile, probe_network
    from dbkit.runtime.sim.partitioned_step import partitioned_step
    from dbkit.sim import ModelShape

    def exchange(p, model: str, k: int = 2) -> float:  # noqa: ANN001
        return partitioned_step(p, ModelShape.of(probe_network(model)), k, 32, bands=True, update=False).exchange

    for link, bulk, thin, thin4 in (("1gbit", 0.05, 0.009, 0.016), ("100mbit", 0.2, 0.009, 0.016)):
        spec = ClusterSpec(hosts=8, link=link, cpu=0.25)
        plain = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002))
        # the bulk probe alone: its bytes' cost beyond the links' time; the hop's message cost stays
        p = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, bulk_exchange_seconds=bulk))
        assert exchange(plain, "bulk") < bulk and exchange(p, "bulk") == pytest.approx(bulk, rel=1e-6)
        assert p.message.partition_message_seconds == plain.message.partition_message_seconds
        assert p.message.partition_seconds_per_byte > 0 == plain.message.partition_seconds_per_byte
        assert "bulk in 2" in p.comments["message.partition_seconds_per_byte"]
        # all three: each probe's exchange is what was measured, and every cost is charged
        p3 = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, bulk_exchange_seconds=bulk,
                                                            thin_exchange_seconds=thin,
                                                            thin4_exchange_seconds=thin4))
        for model, k, measured in (("bulk", 2, bulk), ("thin", 2, thin), ("thin", 4, thin4)):
            assert exchange(p3, model, k) == pytest.approx(measured, rel=1e-6), (link, model, k)
        m = p3.message
        assert m.partition_exchange_seconds > 0 and m.partition_message_seconds > 0 and m.partition_seconds_per_byte > 0
        # a model's exchanges cost more than their links' time; one partition sends nothing
        dense = ModelShape.of(probe_network("dense"))
        free = p3.but(message={"partition_exchange_seconds": 0, "partition_message_seconds": 0,
                               "partition_seconds_per_byte": 0})
        assert (partitioned_step(p3, dense, 4, 32, bands=True).exchange
                > partitioned_step(free, dense, 4, 32, bands=True).exchange)
        assert exchange(p3, "thin", 1) == 0.0
    # measured faster than the links' own time: no cost is negative
    spec = ClusterSpec(hosts=8, link="100mbit", cpu=0.25)
    fast = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, bulk_exchange_seconds=0.01,
                                                          thin_exchange_seconds=1e-5, thin4_exchange_seconds=2e-5))
    assert min(fast.message.partition_exchange_seconds, fast.message.partition_message_seconds,
               fast.message.partition_seconds_per_byte) >= 0
    assert fast.message.partition_seconds_per_byte == pytest.approx(0.0, abs=1e-15)
    for bad, match in ((dict(bulk_exchange_seconds=float("nan")), "bulk_exchange_seconds"),
                       (dict(thin_exchange_seconds=0.01), "needs bulk"),
                       (dict(bulk_exchange_seconds=0.05, thin4_exchange_seconds=0.01), "needs thin"),
                       (dict(fresh_seconds_per_byte=-1e-9), "fresh_seconds_per_byte")):
        with pytest.raises(ValueError, match=match):
            HostProbes(0.03, 0.4, 0.002, **bad)


def test_an_array_made_anew_each_step_costs_what_the_probe_measured_over_the_hosts_speed():
    from dbkit.emulate.profile import HostProbes, emulated_profile

    spec = ClusterSpec(hosts=8, link="1gbit", cpu=0.25)
    p = emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002, fresh_seconds_per_byte=6e-10))
    assert p.compute.fresh_seconds_per_byte * p.machine.cpu_factor == pytest.approx(6e-10)
    assert emulated_profile(spec, 0.05, probes=HostProbes(0.03, 0.4, 0.002)).compute.fresh_seconds_per_byte == 0
    assert p.machine.burst_bytes == 128_000  # the links' token bucket (dbkit.emulate.links.BURST_BYTES)


def test_on_the_emulated_profile_a_slower_link_slows_a_push_bound_simulated_run():
    import dbkit
    from dbkit.emulate.profile import emulated_profile
    from dbkit.sim import Cluster as SimCluster

    def examples_per_second(link: str) -> float:
        spec = ClusterSpec(hosts=2, link=link, cpu=0.25)
        profile = emulated_profile(spec, measured_seconds=0.04).but(machine={"machines": 0})
        with dbkit.DownpourSGD("speech", "speech", cluster=SimCluster(profile), replicas=1, shards=1,
                               optimizer="adagrad", lr=0.01) as job:
            job.fit(seconds=20, progress=False)
            return job.report()["examples_per_second"]

    slow, fast = examples_per_second("10mbit"), examples_per_second("1gbit")
    # a speech step moves about 8 MB: at 10 Mbit/s the link, not the arithmetic, sets the pace
    assert fast > 5 * slow


@needs_emulation
def test_the_shards_link_saturation_is_measured_within_the_links_rate_beside_the_simulator():
    from dbkit.sim.figures import Saturation, measure_saturation

    lines: list[str] = []
    with Cluster(hosts=3, link="100mbit", cpu=0.25, progress=lines.append) as emulated:
        with pytest.raises(ValueError, match="need 4 hosts"):
            measure_saturation(emulated, shards=(2,), replicas=(2,), seconds=1)
        run = measure_saturation(emulated, shards=(1,), replicas=(1, 2), seconds=3, progress=lines.append)
    assert any("workers at tcp://198.18.0.254:8786" in line for line in lines)  # start() said where it is
    assert [(p.shards, p.replicas) for p in run.points] == [(1, 1), (1, 2)] and run.recorded is None
    for p in run.points:
        # the bytes a shard served in the busier direction fit through its shaped link, and fill a good part of it
        assert 10 < p.shard_link_mbit <= 1.02 * run.link_mbit == 102
        assert p.examples_per_second > 0 and p.simulated_examples_per_second > 0
    assert Saturation.from_dict(run.to_dict()) == run
    assert leftovers() == []


def test_a_recorded_saturation_run_says_it_is_recorded_and_a_malformed_one_is_refused(tmp_path: Path):
    from dbkit.sim.figures import Saturation, recorded_saturation

    run = recorded_saturation()
    assert run.recorded and "recorded" in run.recorded  # labelled: not a measurement of this machine
    assert {p.shards for p in run.points} == {1, 2} and len(run.curve(1)[0]) >= 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**run.to_dict(), "points": [{"shards": 1}]}))
    with pytest.raises(ValueError, match="not a link-saturation run"):
        recorded_saturation(bad)
    with pytest.raises(ValueError, match="not a link-saturation run"):
        Saturation.from_dict({"hosts": 8})


@needs_emulation
def test_the_hosts_are_built_and_removed_from_inside_a_running_event_loop_as_in_a_notebook():
    # a kernel runs each cell inside its asyncio loop; pyroute2's synchronous calls start a loop of their own
    import asyncio

    async def in_a_cell() -> list[str]:
        with Cluster(hosts=1, cpu=0.5) as emulated:
            emulated.set_link(1, up=False)
            emulated.set_link(1, up=True)
            return leftovers()

    made = asyncio.run(in_a_cell())
    assert "dbkit-h1" in made and leftovers() == []


STRANGERS = """
import socket, sys, time
held = []
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    for _ in range(200):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(b"\\x00" * 7)  # half a hello, then nothing
        held.append(s)
print(len(held), flush=True)
time.sleep(600)
"""


@needs_emulation
def test_a_stranger_host_holding_connections_to_the_shards_wires_keeps_no_replica_off_them():
    """Issue #48, 1, where a stranger can reach the wire: on a multi-host cluster a worker's shard wire listens on
    the worker's own address, which any host on the network reaches. Host 4, not in the job, holds 200 idle
    connections to each shard's wire; replicas added then connect, train, and are served."""
    from distributed import Client

    import dbkit

    def wire_address(dask_worker) -> list[str]:  # noqa: ANN001 - on each worker: where its shard wire listens
        return [f"{p.server.address.host}:{p.server.address.port}" for name, p in dask_worker.plugins.items()
                if name.startswith("dbkit-shard-wire") and getattr(p, "server", None) is not None]

    def wire_figures(dask_worker) -> list[tuple[int, dict]]:  # noqa: ANN001
        return [(p.server.connections, dict(p.server.peers)) for name, p in dask_worker.plugins.items()
                if name.startswith("dbkit-shard-wire") and getattr(p, "server", None) is not None]

    with Cluster(hosts=4, link="100mbit", cpu=0.5) as emulated, Client(emulated.address) as client:
        workers = sorted(client.scheduler_info()["workers"])
        stranger = emulated.hosts[3]
        shard_workers, replica_workers = workers[:2], [workers[2]]
        assert all(stranger.address not in w for w in shard_workers + replica_workers)
        with dbkit.DownpourSGD("mlp", "digits", client=client, replicas=1, shards=2, shard_workers=shard_workers,
                               replica_workers=replica_workers) as job:
            job.fit(steps=20, progress=False)
            targets = [a for w in shard_workers for a in client.run(wire_address, workers=[w])[w]]
            held = subprocess.Popen(["ip", "netns", "exec", stranger.netns, sys.executable, "-c", STRANGERS, *targets],
                                    stdout=subprocess.PIPE, text=True)
            try:
                assert held.stdout is not None and int(held.stdout.readline()) == 200 * len(targets)
                job.set(replicas=3)  # two new replicas connect to both wires past the strangers
                job.fit(steps=120, progress=False)
                figures = {w: client.run(wire_figures, workers=[w])[w] for w in shard_workers}
                states = [(r.state, r.steps) for r in job.replicas()]
            finally:
                held.kill()
                held.wait(timeout=30)
    assert len(states) == 3 and all(state == "paused" and steps > 0 for state, steps in states), states
    for wires in figures.values():
        ((connections, peers),) = wires
        assert connections >= 200 + 3  # the strangers still held, and the three replicas' connections
        assert stranger.address not in peers  # none of the stranger's connections showed the token
    assert leftovers() == []
