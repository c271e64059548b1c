"""Downpour with no framework: what two bare processes and a raw socket give, the measured bound under dbkit.

    python benchmarks/bare_downpour.py [--case speech] [--n 4] [--seconds 5]

Two spawned processes, each one replica and one parameter shard (half the
model), with nothing but numpy, threads and loopback TCP: no Dask, no actors,
no figures, no steering. Each computes gradients exactly as the sync SGD
baseline does (the same network, batch and one BLAS thread), accrues them and
takes the local step, and every ``n`` steps starts a push-and-fetch on a
thread of its own (the paper's client): its own half is updated in process,
the other half is sent to the peer's shard, which applies ``p -= lr * g`` and
sends its parameters back. Fetched parameters replace the replica's own at the
next step after they arrive. This is the least any Downpour has to do here,
so its rate against one bare process computing alone is the bound a
framework is measured against (``downpour_throughput.py``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import struct
import threading
import time

from common import end_processes, get_from, recv_exactly, write_json

HEADER = struct.Struct("<q")  # bytes of gradient that follow (0: goodbye)


def _serve(conn: socket.socket, own, lock: threading.Lock, lr) -> None:
    """The shard: apply each pushed gradient to ``own`` and send ``own`` back."""
    import numpy as np

    landing, scratch = np.empty_like(own), np.empty_like(own)
    head = bytearray(HEADER.size)
    with conn:
        while recv_exactly(conn, memoryview(head)):
            (nbytes,) = HEADER.unpack(head)
            if nbytes == 0 or not recv_exactly(conn, landing.data.cast("B")):
                return
            with lock:
                np.multiply(landing, lr, out=scratch)
                own -= scratch
                conn.sendall(own.data.cast("B"))


def _replica(i: int, case: dict, n: int, seconds: float, ports, ready, start, out) -> None:
    """Process ``i`` of two: replica ``i`` and shard ``i``; puts its examples per second on ``out``."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from dbkit import data, nn
    from dbkit.data import MiniBatches

    ds = data.load(case["dataset"])
    net = nn.build(case["model"], ds.n_features, ds.n_classes, l2=1e-4)
    batches = MiniBatches(ds.X_train, ds.y_train, case["batch_size"], seed=i)
    lr = np.float32(case["lr"])
    w = net.init_params(0)
    halves = [slice(0, net.size // 2), slice(net.size // 2, net.size)]
    mine, theirs = halves[i], halves[1 - i]
    own, lock = w[mine].copy(), threading.Lock()
    accrued, sending, fetched = np.zeros_like(w), np.zeros_like(w), w.copy()
    scratch = np.empty_like(own)

    server = socket.create_server(("127.0.0.1", 0))
    ports[i].put(server.getsockname()[1])  # each process's port on a queue of its own: read the other's
    peer = socket.create_connection(("127.0.0.1", ports[1 - i].get(timeout=120)))
    conn, _ = server.accept()
    for s in (peer, conn):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server_thread = threading.Thread(target=_serve, args=(conn, own, lock, lr), daemon=True)
    server_thread.start()

    done = threading.Event()
    done.set()
    requests: list = []
    wake = threading.Condition()

    failed: list[BaseException] = []

    def exchange() -> None:  # the client's background push-and-fetch
        try:
            while True:
                with wake:
                    while not requests:
                        wake.wait()
                    if requests.pop() is None:
                        peer.sendall(HEADER.pack(0))
                        return
                with lock:  # the half held here: updated and read in process
                    np.multiply(sending[mine], lr, out=scratch)
                    own[:] -= scratch
                    fetched[mine] = own
                peer.sendall(HEADER.pack(sending[theirs].nbytes))
                peer.sendall(sending[theirs].data.cast("B"))
                if not recv_exactly(peer, fetched[theirs].data.cast("B")):
                    raise ConnectionError("the peer closed its shard")
                done.set()
        except Exception as e:  # noqa: BLE001 - the replica must not wait for ever on a broken exchange
            failed.append(e)
            done.set()

    client = threading.Thread(target=exchange, daemon=True)
    client.start()
    taken = True

    losses: list[float] = []

    def step(k: int) -> None:
        nonlocal w, fetched, accrued, sending, taken
        if not taken and done.is_set():  # the fetch arrived: its parameters replace the replica's
            w, fetched, taken = fetched, w, True
        X, y = next(batches)
        loss, grad = net.loss_and_grad(w, X, y)
        if not (np.isfinite(loss) and np.isfinite(np.dot(grad, grad))):
            raise FloatingPointError("the bare Downpour diverged")
        losses.append(float(loss))
        accrued += grad
        grad *= lr
        w -= grad
        if k % n == n - 1:
            done.wait()
            if failed:
                raise RuntimeError(f"the bare exchange failed: {failed[0]!r}")
            if not taken:
                w, fetched = fetched, w
            accrued, sending = sending, accrued
            accrued[:] = 0.0
            taken = False
            done.clear()
            with wake:
                requests.append(sending)
                wake.notify()

    with threadpool_limits(1):
        k = 0
        for _ in range(20):
            step(k)
            k += 1
        ready.put(i)
        start.wait()
        k0, t0 = k, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            step(k)
            k += 1
        rate = (k - k0) * case["batch_size"] / (time.perf_counter() - t0)
        done.wait()  # then goodbye; and this shard serves until the peer has said goodbye too
        with wake:
            requests.append(None)
            wake.notify()
        client.join(30)
        server_thread.join(60)
    out.put((rate, float(np.mean(losses[:20])), float(np.mean(losses[-20:]))))


def bare_downpour(case: dict, n: int, seconds: float, losses: list | None = None, during=None) -> float:
    """Examples per second of two bare Downpour processes together (see the module docstring); each
    process's mean loss over its first and last 20 steps is appended to ``losses`` if given, and
    ``during(pids)`` is called once the window opens (``thread_time.py`` reads the threads' times)."""
    ctx = mp.get_context("spawn")
    ports, ready, start, out = (ctx.Queue(), ctx.Queue()), ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_replica, args=(i, case, n, seconds, ports, ready, start, out)) for i in (0, 1)]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:  # both connected, loaded and warm before the window opens
            get_from(ready, procs, 120, "bare Downpour processes")
        time.sleep(0.5)
        start.set()
        if during is not None:
            during([proc.pid for proc in procs])
        results = [get_from(out, procs, seconds + 120, "bare Downpour processes") for _ in procs]
        if losses is not None:
            losses.extend((first, last) for _, first, last in results)
        return sum(rate for rate, _, _ in results)
    finally:
        end_processes(procs)


def main(argv=None) -> int:
    from downpour_throughput import CASES, _sgd_rate

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", default="speech", choices=sorted(CASES))
    p.add_argument("--n", type=int, default=4, help="n_fetch = n_push")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    case = CASES[args.case]
    one = _sgd_rate(case, args.seconds)[0]
    losses: list = []
    two = bare_downpour(case, args.n, args.seconds, losses)
    print(f"{args.case}, n = {args.n}: one process computing alone {one:.0f} examples/s; two bare Downpour "
          f"processes {two:.0f} examples/s = {two / one:.2f}x")
    write_json(args.json, "bare_downpour", {"case": args.case, "n": args.n, "one": one, "two": two,
                                            "ratio": two / one, "losses": losses})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
