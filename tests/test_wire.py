"""The shard wire (issue #12): fetch and push over a plain socket compute exactly what calling the shard
does, a broken peer fails the calls instead of hanging them, bad frames and strangers are refused with
the shard untouched, and every thread ends on close. Then on a LocalCluster: the wire is what replicas
use, and a Cluster stops its workers' wires when it closes."""

import contextlib
import dataclasses
import gc
import socket
import threading
import time
import types

import numpy as np
import pytest

import dbkit
from dbkit import data
from dbkit.config import RunConfig
from dbkit.ps import ParameterShard, ShardedParameters, balanced_layout, local_shards
from dbkit.ps.records import WireAddress
from dbkit.ps.threaded_shard import ThreadedShard
from dbkit.ps.wire_client import WireShard
from dbkit.ps.wire_frames import ERROR, FRAME, HELLO, WireError, recv_reply
from dbkit.ps.wire_server import WireServer


def _wire_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(("dbkit-wire", "dbkit-shard-call"))]


def _no_wire_threads() -> bool:
    """No wire thread left (the process's wire loop ends once its last connection has: allow it a moment)."""
    deadline = time.monotonic() + 5
    while _wire_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    return _wire_threads() == []


@pytest.fixture
def served():
    """Two shards over 1001 parameters behind a WireServer in this process, and a twin pair called directly."""
    init = np.random.default_rng(0).standard_normal(1001).astype(np.float32)
    layout = balanced_layout(1001, 2)
    shards = {f"s{i}": ParameterShard(i, a, b, init[a:b].copy(), "adagrad", 0.05)
              for i, (a, b) in enumerate(layout.ranges)}
    server = WireServer(shards.get)
    yield server, shards, layout, local_shards(init.copy(), 2, "adagrad", 0.05)
    server.close()
    assert _no_wire_threads()


def test_the_wire_computes_exactly_what_calling_the_shards_does(served):
    server, shards, layout, twin = served
    wired = ShardedParameters([WireShard(server.address, k, pusher="replica0") for k in shards], layout,
                              name="replica0")
    rng = np.random.default_rng(1)
    assert np.array_equal(wired.fetch(), twin.fetch())
    for k in range(6):
        g = rng.standard_normal(1001).astype(np.float32)
        if k % 2:
            a1, p1 = wired.push_fetch(g, examples=16)
            a2, p2 = twin.push_fetch(g, examples=16)
            assert a1 == a2 and np.array_equal(p1, p2)
        else:
            assert wired.push(g, examples=16) == twin.push(g, examples=16)
    assert np.array_equal(wired.fetch(), twin.fetch()) and wired.versions == twin.versions == [6, 6]
    assert (wired.bytes_fetched, wired.bytes_pushed) == (twin.bytes_fetched, twin.bytes_pushed)
    refused = wired.push(np.full(1001, np.nan, np.float32))  # refused by the shard, as over any transport
    assert not any(a.accepted for a in refused) and "non-finite" in refused[0].reason
    f = shards["s0"].figures()
    assert f.pushers == {"replica0": 6} and f.version == 6 and f.rejected == 1
    wired.close()


def test_calls_are_answered_in_order_and_other_methods_go_to_the_fallback(served):
    server, shards, _, _ = served
    w = WireShard(server.address, "s1", pusher="r", fallback=shards["s1"])
    g = np.ones(w.size, np.float32)
    futures = [w.push(g, 0), w.fetch(), w.push(g, 1), w.push_fetch(g, 2)]
    answers = [f.result(timeout=10) for f in futures]
    assert [answers[0].version, answers[1][0], answers[2].version, answers[3][1]] == [1, 1, 2, 3]
    assert w.figures().version == 3  # not a wire call: the fallback (here the shard itself) answers
    with pytest.raises(ValueError, match="holds 500 parameters"):
        w.push(np.ones(3, np.float32), 0)
    w.close()
    w.close()  # twice is fine
    with pytest.raises(WireError, match="closed"):
        w.fetch()


def test_a_stranger_and_an_unknown_shard_are_refused(served):
    server, shards, _, _ = served
    wrong = dataclasses.replace(server.address, token="00" * 16)
    with pytest.raises(WireError, match="wrong token"):
        WireShard(wrong, "s0")
    with pytest.raises(WireError, match="no shard nope"):
        WireShard(server.address, "nope")
    with pytest.raises(WireError, match="cannot reach"):
        with _closed_port() as port:
            WireShard(WireAddress("127.0.0.1", port, "00" * 16), "s0")
    assert all(s.version == 0 for s in shards.values())


def test_the_wire_records_which_addresses_showed_its_token(served):
    server, _, _, _ = served
    wrong = dataclasses.replace(server.address, token="00" * 16)
    with pytest.raises(WireError, match="wrong token"):
        WireShard(wrong, "s0")
    assert server.peers == {}  # a stranger is not a peer
    ends = [WireShard(server.address, "s0"), WireShard(server.address, "s1")]
    assert server.peers == {"127.0.0.1": 2}
    for end in ends:
        end.close()


@contextlib.contextmanager
def _closed_port():
    """A port bound but not listening while in use: a connection to it is refused, and nothing else can take it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _hello(address: WireAddress, key: str) -> socket.socket:
    sock = socket.create_connection((address.host, address.port), timeout=5)
    sock.sendall(HELLO.pack(bytes.fromhex(address.token), len(key), 0) + key.encode())
    sock.recv(4096)  # the welcome
    return sock


@pytest.mark.parametrize("frame", [
    FRAME.pack(2, 0, 0, 16, 0, 0, 1 << 40),  # a header claiming a terabyte
    FRAME.pack(2, 0, 0, 16, 0, 0, 7),  # not whole floats
    FRAME.pack(9, 0, 0, 0, 0, 0, 0),  # no such operation
    FRAME.pack(1, 0, 0, 0, 0, 12, 0) + b'{"a": "b"}  ',  # a request carries no JSON
])
def test_a_malformed_request_ends_its_connection_and_leaves_the_shard_untouched(served, frame):
    server, shards, _, _ = served
    before = shards["s0"].params.copy()
    sock = _hello(server.address, "s0")
    sock.sendall(frame)
    sock.settimeout(5)
    end = time.monotonic() + 5
    with contextlib.suppress(ConnectionResetError):  # (a reset when the server closes on bytes it did not read)
        while sock.recv(4096) and time.monotonic() < end:  # an error reply, then the server closes
            pass
    sock.close()
    assert shards["s0"].version == 0 and np.array_equal(shards["s0"].params, before)
    healthy = WireShard(server.address, "s0")  # the server goes on serving others
    assert healthy.fetch().result(timeout=5)[0] == 0
    healthy.close()


def test_a_lost_peer_fails_every_call_and_a_gone_shard_says_so(served):
    server, shards, _, _ = served
    w = WireShard(server.address, "s0")
    s0 = shards.pop("s0")  # released from the process: its connections learn it at the next call
    with pytest.raises(RuntimeError, match="gone"):
        w.fetch().result(timeout=5)
    shards["s0"] = s0
    w.close()
    w2 = WireShard(server.address, "s0", timeout=5)
    server.close()  # the worker died: calls fail at once, none waits forever
    with pytest.raises(WireError):
        w2.push(np.ones(w2.size, np.float32), 0).result(timeout=10)
    with pytest.raises(WireError):  # and every call after it
        w2.fetch().result(timeout=10)
    w2.close()


def test_a_truncated_reply_is_an_error_not_a_hang():
    listener = socket.create_server(("127.0.0.1", 0))
    token = b"k" * 16

    def half_answer():
        conn, _ = listener.accept()
        conn.recv(4096)
        conn.sendall(FRAME.pack(0, 0, 0, 0, 0, 11, 0) + b'{"size": 4}')  # welcome
        conn.recv(4096)
        conn.sendall(FRAME.pack(0, 0, 0, 0, 0, 14, 16) + b'{"version": 1}' + b"\0" * 5)  # 5 of 16 bytes
        conn.close()

    t = threading.Thread(target=half_answer)
    t.start()
    w = WireShard(WireAddress("127.0.0.1", listener.getsockname()[1], token.hex()), "s", timeout=5)
    with pytest.raises(WireError, match="closed"):
        w.fetch().result(timeout=10)
    w.close()
    t.join()
    listener.close()


def test_a_threaded_shard_answers_as_the_shard_does_in_order():
    a, b = ParameterShard(0, 0, 50, np.zeros(50, np.float32)), ParameterShard(0, 0, 50, np.zeros(50, np.float32))
    t = ThreadedShard(a)
    g = np.arange(50, dtype=np.float32)
    futures = [t.push(g, 0, "r", 4), t.push_fetch(g, 1, "r", 4), t.fetch()]
    got = [f.result(timeout=5) for f in futures]
    want = [b.push(g, 0, "r", 4), b.push_fetch(g, 1, "r", 4), b.fetch()]
    assert got[0] == want[0] and got[1][0] == want[1][0] and np.array_equal(got[2][1], want[2][1])
    assert t.figures().pushers == {"r": 2}
    t.close()
    assert _no_wire_threads()


def test_the_ends_of_one_shard_share_its_call_thread_which_ends_with_the_last():
    """A worker holds a call thread per shard, not one per replica: two replicas' ends of one shard take turns
    on one thread, in the order their calls were made, and it ends when both have closed."""
    shard, twin = ParameterShard(0, 0, 40, np.zeros(40, np.float32)), ParameterShard(0, 0, 40, np.zeros(40, np.float32))
    other = ParameterShard(1, 0, 10, np.zeros(10, np.float32))
    names = lambda: [t for t in threading.enumerate() if t.name.startswith("dbkit-shard-call")]  # noqa: E731
    before = len(names())
    ends = [ThreadedShard(shard), ThreadedShard(shard), ThreadedShard(other)]
    g = np.linspace(-1, 1, 40, dtype=np.float32)
    calls = [ends[0].push(g, 0, "a", 2), ends[1].push(2 * g, 0, "b", 2), ends[0].fetch(), ends[2].fetch()]
    got = [c.result(timeout=5) for c in calls]
    twin.push(g, 0, "a", 2)
    twin.push(2 * g, 0, "b", 2)
    np.testing.assert_array_equal(got[2][1], twin.fetch()[1])  # both pushes, in order, before the fetch
    assert len(names()) == before + 2  # one per shard: three ends, two shards
    ends[0].close()
    assert ends[1].fetch().result(timeout=5)[0] == 2  # the other end goes on
    with pytest.raises(RuntimeError, match="closed"):
        ends[0].fetch()
    ends[1].close()
    ends[2].close()
    assert len(names()) == before


def test_a_dropped_end_that_was_never_closed_takes_its_shards_call_thread_with_it():
    """The table that finds a shard's call thread holds it weakly: ends that are dropped unclosed (a test that
    forgot, a replica that died) do not keep the thread alive, and a later end of the same shard gets a new one."""
    shard = ParameterShard(0, 0, 8, np.zeros(8, np.float32))
    names = lambda: [t for t in threading.enumerate() if t.name.startswith("dbkit-shard-call")]  # noqa: E731
    before = len(names())
    end = ThreadedShard(shard)
    assert end.fetch().result(timeout=5)[0] == 0
    assert len(names()) == before + 1
    del end
    gc.collect()
    deadline = time.monotonic() + 5
    while len(names()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(names()) == before
    again = ThreadedShard(shard)
    assert again.fetch().result(timeout=5)[0] == 0
    again.close()
    assert len(names()) == before



def test_shards_on_call_threads_write_fetches_in_place_and_match_the_shards():
    init = np.random.default_rng(2).standard_normal(300).astype(np.float32)
    layout = balanced_layout(300, 3)
    twin = local_shards(init.copy(), 3, "adagrad", 0.1)
    threaded = ShardedParameters([ThreadedShard(ParameterShard(i, a, b, init[a:b].copy(), "adagrad", 0.1))
                                  for i, (a, b) in enumerate(layout.ranges)], layout)
    g = np.random.default_rng(3).standard_normal(300).astype(np.float32)
    answers, params = threaded.start_push_fetch(g, 8).result()
    want_answers, want_params = twin.push_fetch(g, examples=8)
    assert answers == want_answers and params.tobytes() == want_params.tobytes()
    assert threaded.fetch().tobytes() == twin.fetch().tobytes() and threaded.versions == twin.versions
    assert threaded.bytes_fetched == twin.bytes_fetched
    with pytest.raises(ValueError, match="shape"):
        threaded.shards[0].shard.fetch_into(np.empty(7, np.float32))
    threaded.close()
    assert _no_wire_threads()


def test_the_plugin_serves_only_plain_tcp_workers():
    from dbkit.runtime.dask.wire import ShardWirePlugin

    tls = ShardWirePlugin("x")
    tls.setup(types.SimpleNamespace(address="tls://127.0.0.1:9999", state=types.SimpleNamespace(actors={})))
    assert tls.server is None  # over TLS replicas talk through Dask: nothing leaves a worker unencrypted
    tcp = ShardWirePlugin("x")
    tcp.setup(types.SimpleNamespace(address="tcp://127.0.0.1:9999", state=types.SimpleNamespace(actors={})))
    assert tcp.server is not None and tcp.server.address.host == "127.0.0.1"
    tcp.teardown(None)
    assert _no_wire_threads()


def test_transport_is_checked():
    assert RunConfig.make(algorithm="downpour", transport="actor").downpour.transport == "actor"
    with pytest.raises(ValueError, match="transport"):
        RunConfig.make(algorithm="downpour", transport="udp")


# ---- on a LocalCluster -----------------------------------------------------------------------
def _served_requests(client) -> dict:
    def count(dask_worker):
        return {name: p.server.requests for name, p in dask_worker.plugins.items()
                if name.startswith("dbkit-shard-wire") and p.server is not None}
    return client.run(count)


@pytest.mark.cluster
@pytest.mark.parametrize("transport", ["socket", "actor"])
def test_replicas_fetch_and_push_over_the_wire_unless_told_not_to(digits, local_cluster, transport):
    def ours():
        return local_cluster.client.run(
            lambda: sorted(t.name for t in threading.enumerate() if t.name.startswith("dbkit-")))

    before = ours()  # other tests may have started this cluster's own wires: those stay
    with dbkit.DownpourSGD("mlp", digits, replicas=2, shards=2, n_fetch=2, n_push=2, lr=0.05, seed=3,
                           client=local_cluster.client, transport=transport) as job:
        job.fit(steps=200, progress=False)
        requests = _served_requests(local_cluster.client)
        report = job.report()
    served = sum(n for per_worker in requests.values() for n in per_worker.values())
    if transport == "socket":  # each replica reaches the shard on the other worker over the wire
        assert served >= 2 * 50
    else:
        assert served == 0
    assert report["final"]["test_accuracy"] > 0.8
    assert all(sum(s["pushers"].values()) == s["updates"] for s in report["shards"])
    assert ours() == before  # the job's cluster view stopped its wires, and its replicas their threads


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


@pytest.mark.cluster
def test_a_lost_shard_ends_the_job_cleanly_with_a_report_and_the_surviving_parameters(digits):
    """Without checkpoints a lost shard cannot come back (issue #13): the replicas notice on the wire, the
    job ends by itself as failed saying which shard, the report is written, the surviving shard's
    parameters are read fresh and the lost one's are those last read."""
    import os
    import signal

    from dbkit.runtime.dask import Cluster
    from dbkit.telemetry import validate_report

    with Cluster(n_workers=3) as cluster:
        w = cluster.workers()
        with dbkit.DownpourSGD("mlp", digits, replicas=2, shards=2, lr=0.05, client=cluster.client,
                               shard_workers=[w[0], w[1]], replica_workers=[w[2]]) as job:
            job.fit(steps=100, progress=False)
            lost = [s.index for s in job.shards() if s.worker == w[0]]
            ranges = job.layout.layout.ranges
            before = job.parameters()  # what the driver last read
            os.kill(cluster.client.run(os.getpid, workers=[w[0]])[w[0]], signal.SIGKILL)
            job.fit(steps=10**7, progress=False)  # a budget it never reaches: fit returns because the job ended
            assert job.snapshot().state == "failed"
            after = job.parameters()
        report = job.report()
    assert validate_report(report) == [] and report["state"] == "failed"
    errors = [e["message"] for e in report["events"] if e["type"] == "ErrorEvent"]
    assert errors and "lost parameter shard" in errors[-1] and w[0] in errors[-1]
    assert [s["worker"].endswith("(lost)") for s in report["shards"]] == [i in lost for i in range(2)]
    assert np.isfinite(after).all()
    (a, b), = [ranges[i] for i in lost]
    back = job.layout.to_server
    assert np.array_equal(back(after)[a:b], back(before)[a:b])  # the lost shard: as last read


def test_a_stranger_is_refused_before_its_bytes_are_read_and_idle_strangers_are_bounded_and_timed_out():
    """Issue #21, 11: a wrong token with a non-UTF-8 key printed a thread's traceback (the key was decoded
    before the token was checked), and 300 idle connections held 300 threads until the job ended."""
    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    server = WireServer(shards.get, hello_timeout=0.5, max_strangers=8)
    failures: list = []
    before, threading.excepthook = threading.excepthook, lambda args: failures.append(args)
    try:
        with socket.create_connection((server.address.host, server.address.port), timeout=5) as s:
            s.sendall(HELLO.pack(b"\x00" * 16, 4, 0) + b"\xff\xfe\xfd\xfc")
            status, meta, _ = recv_reply(s, 0)
        assert status == ERROR and "wrong token" in meta["error"]
        idle = [socket.create_connection((server.address.host, server.address.port), timeout=5) for _ in range(40)]
        deadline = time.monotonic() + 10
        # each timed out, or refused at once (and each accepted first: under load the server may not have
        # taken them in yet when the loop starts, with no connection counted)
        while (server.connections or server.refused < 41) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.connections == 0
        assert server.refused == 41  # the wrong token and every idle one
        assert [t.name for t in threading.enumerate() if t.name.startswith("dbkit-wire")] == ["dbkit-wire"]
        for s in idle:
            s.close()
        healthy = WireShard(server.address, "s0")  # the token's holder is served as ever
        assert healthy.fetch().result(timeout=5)[0] == 0
        healthy.close()
    finally:
        threading.excepthook = before
        server.close()
    assert failures == []  # no thread died with a traceback


def test_idle_strangers_cannot_keep_a_replica_off_the_wire():
    """Issue #48, 1: with as many idle connections open as the server allows strangers, a replica holding the
    token was reset at once. Now a newcomer drops the oldest stranger, and one thread serves them all."""
    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    server = WireServer(shards.get, hello_timeout=30.0, max_strangers=8)
    idle = [socket.create_connection((server.address.host, server.address.port), timeout=5) for _ in range(20)]
    try:
        replica = WireShard(server.address, "s0", pusher="replica0")
        assert replica.push(np.ones(10, np.float32), 0).result(timeout=5).accepted
        assert replica.fetch().result(timeout=5)[0] == 1
        replica.close()
        deadline = time.monotonic() + 5
        while (server.refused < 13 or server.connections > 7) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.refused == 13 and server.connections == 7  # the replica gone, 7 strangers left
        assert sum(t.name == "dbkit-wire" for t in threading.enumerate()) == 1
    finally:
        for s in idle:
            s.close()
        server.close()


def test_a_process_serves_and_calls_the_wire_on_one_loop_that_ends_with_its_last_user():
    """The shards' server and the replicas' calls of one process ride one thread: a replica's end of a shard
    served in the same process needs no second one, the loop outlives any one user, and ends with the last."""
    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    wire = lambda: [t.name for t in threading.enumerate() if t.name.startswith("dbkit-wire")]  # noqa: E731
    assert _no_wire_threads()  # (the last test's loop ends a moment after its last user)
    server = WireServer(shards.get)
    end = WireShard(server.address, "s0", pusher="replica0")
    assert end.push(np.ones(10, np.float32), 0).result(timeout=5).accepted
    assert wire() == ["dbkit-wire"]  # the server and the calls: one loop
    end.close()
    assert wire() == ["dbkit-wire"]  # the server still uses it
    again = WireShard(server.address, "s0")
    assert again.fetch().result(timeout=5)[0] == 1
    again.close()
    server.close()
    assert _no_wire_threads()


def test_a_users_error_on_the_wire_loop_is_reported_and_the_loop_serves_on():
    """A bug in one user's handler must not end the loop every other user of the process shares: it goes to
    ``threading.excepthook``, and the next call is served."""
    from dbkit.ps.wire_loop import WireLoop

    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    seen, before = [], threading.excepthook
    threading.excepthook = lambda args: seen.append(args.exc_type)
    server = WireServer(shards.get)
    try:
        end = WireShard(server.address, "s0")
        loop = WireLoop.join()
        loop.call_soon(lambda: 1 / 0)
        loop.leave()
        assert end.fetch().result(timeout=5)[0] == 0
        assert seen == [ZeroDivisionError]
        end.close()
    finally:
        threading.excepthook = before
        server.close()


def test_a_replica_connects_and_fetches_while_200_idle_strangers_hold_connections():
    """Issue #48, 1: 200 idle connections that never show the token (half a hello each) cost a replica with it
    nothing: it is greeted, fetches and pushes while all 200 are still held open."""
    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    server = WireServer(shards.get, hello_timeout=60.0)
    idle = [socket.create_connection((server.address.host, server.address.port), timeout=5) for _ in range(200)]
    try:
        for s in idle:
            s.sendall(b"\x00" * 7)
        replica = WireShard(server.address, "s0", pusher="replica0")
        assert replica.push(np.ones(10, np.float32), 0).result(timeout=5).accepted
        version, params = replica.fetch().result(timeout=5)
        assert version == 1 and params[0] == np.float32(-0.1)
        assert server.connections == 201 and server.refused == 0  # every stranger still held, none in its way
        replica.close()
    finally:
        for s in idle:
            s.close()
        server.close()


def test_a_flood_from_one_address_drops_only_its_own_strangers_and_is_logged_once(caplog):
    """Strangers from 127.0.0.2 keep their places while 60 more from 127.0.0.1 crowd out each other; the flood
    is one warning, not one per connection."""
    shards = {"s0": ParameterShard(0, 0, 10, np.zeros(10, np.float32), "sgd", 0.1)}
    server = WireServer(shards.get, hello_timeout=60.0, max_strangers_per_address=8)
    caplog.set_level("WARNING", logger="dbkit.wire")
    other = [socket.create_connection((server.address.host, server.address.port), timeout=5,
                                      source_address=("127.0.0.2", 0)) for _ in range(5)]
    flood = [socket.create_connection((server.address.host, server.address.port), timeout=5) for _ in range(60)]
    try:
        deadline = time.monotonic() + 10
        while (server.refused < 52 or server.connections > 13) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.refused == 52 and server.connections == 13  # 8 of the flood, all 5 of the other address
        for s in other:  # still open: a byte sent is taken, not refused
            s.sendall(b"\x00")
        assert len([r for r in caplog.records if "without the token" in r.getMessage()]) == 1
        replica = WireShard(server.address, "s0", pusher="replica0")
        assert replica.fetch().result(timeout=5)[0] == 0
        replica.close()
    finally:
        for s in other + flood:
            s.close()
        server.close()
