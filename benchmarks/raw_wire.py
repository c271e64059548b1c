"""What loopback TCP costs with no framework: the floor under every parameter-server message.

    python benchmarks/raw_wire.py [--sizes 40,2093184] [--trips 200]

Two bare processes on 127.0.0.1: one sends ``nbytes`` and the other sends
``nbytes`` back (a push answered by a fetch of the same size), with plain
``socket.sendall`` and ``recv_into`` into a preallocated buffer. Reported per
round trip: wall milliseconds and the CPU milliseconds each process spent
(``time.process_time``), which is what the round trip takes from a core that
could be computing gradients instead.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import time
from dataclasses import asdict, dataclass

from common import get_from, recv_exactly, write_json


@dataclass(frozen=True)
class RawTrip:
    nbytes: int
    wall_ms: float
    caller_cpu_ms: float
    server_cpu_ms: float


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    if not recv_exactly(sock, view):
        raise ConnectionError("peer closed")


def _echo(port_out, nbytes: int, trips: int, cpu_out) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port_out.put(server.getsockname()[1])
        conn, _ = server.accept()
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = bytearray(nbytes)
            view = memoryview(buf)
            c0 = time.process_time()
            for i in range(trips + 5):
                if i == 5:
                    c0 = time.process_time()
                _recv_exactly(conn, view)
                conn.sendall(view)
            cpu_out.put(time.process_time() - c0)


def raw_round_trip(nbytes: int, trips: int = 200) -> RawTrip:
    """Median-free mean cost of ``trips`` round trips of ``nbytes`` each way (after 5 to warm up)."""
    ctx = mp.get_context("spawn")
    port_q, cpu_q = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_echo, args=(port_q, nbytes, trips, cpu_q))
    proc.start()
    try:
        port = get_from(port_q, [proc], 60.0, "echo process")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            out = memoryview(bytearray(nbytes))
            back = memoryview(bytearray(nbytes))
            for i in range(trips + 5):
                if i == 5:
                    t0, c0 = time.perf_counter(), time.process_time()
                sock.sendall(out)
                _recv_exactly(sock, back)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        server_cpu = get_from(cpu_q, [proc], 60.0, "echo process")
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    return RawTrip(nbytes, 1e3 * wall / trips, 1e3 * cpu / trips, 1e3 * server_cpu / trips)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="40,2093184", help="bytes each way (default: 10 and 523,296 float32)")
    p.add_argument("--trips", type=int, default=200)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    rows = [raw_round_trip(int(s), args.trips) for s in args.sizes.split(",")]
    for r in rows:
        print(f"{r.nbytes:>10,} bytes each way: {r.wall_ms:.3f} ms wall, CPU {r.caller_cpu_ms:.3f} ms caller, "
              f"{r.server_cpu_ms:.3f} ms server")
    write_json(args.json, "raw_wire", {"rows": [asdict(r) for r in rows]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
