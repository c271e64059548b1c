"""A replica's connect to a shard's wire while strangers hold connections to it (issue #48's target: within 2x of
its time with none).

    python benchmarks/wire_strangers.py [--strangers 200] [--rounds 50] [--json F]

The path a replica takes: ``WireShard`` (dbkit's client) connects, shows the token, names its shard and
fetches, against a ``WireServer`` serving one shard of 10,000 parameters; once with no other connection, once
with ``--strangers`` idle connections held open, each having sent half a hello (they are being greeted, not
refused). The floor, without dbkit's classes: a raw TCP connect and a 1-byte echo against a bare selectors
server, with and without as many idle connections. Medians of ``--rounds`` connects each, the four measured
in turn within each round.
"""

from __future__ import annotations

import argparse
import selectors
import socket
import statistics
import threading
import time

import numpy as np
from common import write_json


class BareEcho:
    """A bare selectors echo server on loopback (the floor): accepts everything, echoes what arrives."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            for key, _ in self.selector.select(0.1):
                if key.fileobj is self.listener:
                    conn, _ = self.listener.accept()
                    conn.setblocking(False)
                    self.selector.register(conn, selectors.EVENT_READ)
                else:
                    sock = key.fileobj
                    try:
                        data = sock.recv(65536)  # type: ignore[union-attr]
                    except OSError:
                        data = b""
                    if data:
                        sock.sendall(data)  # type: ignore[union-attr]
                    else:
                        self.selector.unregister(sock)
                        sock.close()  # type: ignore[union-attr]

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        self.listener.close()


def bare_connect(port: int) -> float:
    t = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"x")
        s.recv(1)
    return time.perf_counter() - t


def wire_connect(address) -> float:  # noqa: ANN001 - a WireAddress
    from dbkit.ps.wire_client import WireShard

    t = time.perf_counter()
    end = WireShard(address, "s0", pusher="bench")
    end.fetch().result(timeout=10)
    seconds = time.perf_counter() - t
    end.close()
    return seconds


def strangers(port: int, n: int) -> list[socket.socket]:
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    for s in held:
        s.sendall(b"\x00" * 7)  # half a hello: being greeted
    return held


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strangers", type=int, default=200)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    if args.strangers < 0 or args.rounds < 1:
        p.error("--strangers must be >= 0 and --rounds >= 1")
    from dbkit.ps import ParameterShard
    from dbkit.ps.wire_server import WireServer

    shard = ParameterShard(0, 0, 10_000, np.zeros(10_000, np.float32), "sgd", 0.1)
    quiet_wire, busy_wire = (WireServer({"s0": shard}.get, hello_timeout=3600.0) for _ in range(2))
    quiet_bare, busy_bare = BareEcho(), BareEcho()
    held = strangers(busy_wire.address.port, args.strangers) + strangers(busy_bare.port, args.strangers)
    times: dict[str, list[float]] = {"wire, none": [], "wire, strangers": [], "bare, none": [], "bare, strangers": []}
    try:
        for _ in range(args.rounds):
            times["wire, none"].append(wire_connect(quiet_wire.address))
            times["wire, strangers"].append(wire_connect(busy_wire.address))
            times["bare, none"].append(bare_connect(quiet_bare.port))
            times["bare, strangers"].append(bare_connect(busy_bare.port))
        assert busy_wire.connections >= args.strangers  # they were still held while it connected
    finally:
        for s in held:
            s.close()
        for server in (quiet_wire, busy_wire):
            server.close()
        for bare in (quiet_bare, busy_bare):
            bare.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["wire, strangers"] / med["wire, none"]
    floor_ratio = med["bare, strangers"] / med["bare, none"]
    for k, v in med.items():
        print(f"{k:16s} {v * 1e3:8.3f} ms (median of {args.rounds})")
    print(f"a replica's connect and first fetch with {args.strangers} strangers held: {ratio:.2f}x its time with "
          f"none (target: at most 2x); the bare floor: {floor_ratio:.2f}x")
    write_json(args.json, "wire_strangers", {"strangers": args.strangers, "rounds": args.rounds,
                                             "median_seconds": med, "ratio": ratio, "floor_ratio": floor_ratio})


if __name__ == "__main__":
    main()
