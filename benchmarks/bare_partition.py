"""The bare partitioned step: the ceiling a partitioned replica's step is measured against (issue #23).

    python benchmarks/bare_partition.py [--model local|dense] [--steps 20]

Two plain processes (no Dask, no dbkit wire, no threads) compute the same
partitioned forward and backward of a batch as dbkit's partitions do
(``PartitionWorker``'s own narrow arithmetic, so the numpy work is
identical) and exchange the same boundary bytes over one raw loopback
socket: each slice is an 8-byte length, its row count and its float32.
Process 0 starts each step with one byte and takes one byte back when its
partner has finished, as dbkit's lead partition does with its ``go`` and
``done``. ``partition_speedup.py`` times this in the same run as dbkit's K = 2
step and reports dbkit's as a fraction of it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import struct
import time

import numpy as np

from common import end_processes, get_from, recv_exactly

HEADER = struct.Struct("<QI")  # payload bytes, rows


def _tune(sock: socket.socket) -> None:
    """No Nagle delay; buffers that hold a whole slice, so both ends can send before either reads."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, 4 << 20)


def _worker_class():
    from dbkit.partition import PartitionWorker
    from dbkit.runtime.run_through import run_through

    class BarePartition(PartitionWorker):
        """``PartitionWorker``'s arithmetic on the calling thread, its slices on one raw socket to its partner."""

        def __init__(self, index, ownership, sock: socket.socket) -> None:
            super().__init__(index, ownership)
            self.sock = sock

        async def _compute(self, fn, *args):
            return fn(*args)

        def _post(self, to, key, values):
            self.sock.sendall(HEADER.pack(values.nbytes, values.shape[0]))
            self.sock.sendall(values.data.cast("B"))

        async def _take(self, key):
            head = bytearray(HEADER.size)
            recv_exactly(self.sock, memoryview(head))
            nbytes, rows = HEADER.unpack(head)
            out = np.empty(nbytes // 4, dtype=np.float32)
            recv_exactly(self.sock, out.data.cast("B"))
            return out.reshape(rows, -1)

        def step(self, step: int) -> dict:
            return run_through(self.run_step(step, None, None, False))

    return BarePartition


DOWNPOUR_MODELS = {"image-local": (64, 10), "speech": (440, 64)}  # as Downpour trains them on digits and speech


def network(model: str):
    """``partition_speedup.models()[model]``, or a Downpour preset (``DOWNPOUR_MODELS``) on its data's shape."""
    from dbkit import nn
    from partition_speedup import models

    if model in DOWNPOUR_MODELS:
        return nn.build(model, *DOWNPOUR_MODELS[model], l2=1e-4)
    return models()[model]


def _setup(model: str, index: int, sock: socket.socket, batch: int):
    from threadpoolctl import threadpool_limits

    from dbkit.partition import ownership

    threadpool_limits(1)
    net = network(model)
    own = ownership(net, 2)
    part = _worker_class()(index, own, sock)
    part.params[:] = net.init_params(0)[own.param_indices(index)]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
    y = rng.integers(0, net.n_classes, batch)
    part.batch = (X[:, part.narrow[0].reads], y)
    return part


def _partner(model: str, port: int, batch: int, steps: int) -> None:
    """Partition 1: wait for a step's byte, compute, answer with a byte."""
    sock = socket.create_connection(("127.0.0.1", port))
    _tune(sock)
    part = _setup(model, 1, sock, batch)
    go = bytearray(1)
    for s in range(steps + 1):
        if not recv_exactly(sock, memoryview(go)):
            return
        part.step(s)
        sock.sendall(b"d")
    sock.close()


def _lead(model: str, batch: int, steps: int, answers, together, whole: bool = False) -> None:
    """Partition 0: listen, start the partner, start each step with a byte and time it to the partner's byte.
    With ``whole``, no partner: the unpartitioned network's ``loss_and_grad`` instead."""
    try:
        if whole:
            from threadpoolctl import threadpool_limits

            threadpool_limits(1)
            net = network(model)
            params = net.init_params(0)
            rng = np.random.default_rng(0)
            X = rng.standard_normal((batch, net.in_size)).astype(np.float32)
            y = rng.integers(0, net.n_classes, batch)
            together.wait()
            times = []
            for s in range(steps + 1):
                t = time.perf_counter()
                net.loss_and_grad(params, X, y)
                if s:
                    times.append(time.perf_counter() - t)
            answers.put(1e3 * float(np.median(times)))
            return
        listener = socket.create_server(("127.0.0.1", 0))
        partner = mp.get_context("spawn").Process(target=_partner, args=(model, listener.getsockname()[1], batch,
                                                                           steps), daemon=True)
        partner.start()
        listener.settimeout(60)
        sock, _ = listener.accept()
        _tune(sock)
        part = _setup(model, 0, sock, batch)
        together.wait()
        done, times = bytearray(1), []
        for s in range(steps + 1):
            t = time.perf_counter()
            sock.sendall(b"g")
            part.step(s)
            if not recv_exactly(sock, memoryview(done)):
                raise RuntimeError("the bare partner closed its socket")
            if s:  # the first is the warm-up
                times.append(time.perf_counter() - t)
        sock.close()
        partner.join(30)
        answers.put(1e3 * float(np.median(times)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        answers.put(f"{type(e).__name__}: {e}")


def bare_step_ms(model: str, steps: int = 20, batch: int = 32, pairs: int = 1, whole: bool = False) -> float:
    """Median milliseconds of one bare K = 2 step of ``network(model)`` (after a warm-up); with ``pairs``, that
    many replicas (two processes each) step at once, as a job's replicas do, and the mean of their medians.
    With ``whole``, the unpartitioned network's step in ``pairs`` processes at once instead.

    Every process is fresh, with the allocator settings dbkit gives its workers (``WORKER_MALLOC``: large
    temporaries are reused, not mapped afresh every step), so the two differ only in what sits between
    the arithmetic and the socket."""
    from dbkit.runtime.dask.worker_processes import WORKER_MALLOC

    ctx = mp.get_context("spawn")
    answers, together = ctx.Queue(), ctx.Barrier(pairs)
    saved = {k: os.environ.get(k) for k in WORKER_MALLOC}
    os.environ.update(WORKER_MALLOC)
    try:  # not daemonic: each starts its partner
        procs = [ctx.Process(target=_lead, args=(model, batch, steps, answers, together, whole))
                 for _ in range(pairs)]
        for proc in procs:
            proc.start()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        medians = []
        for _ in procs:
            answer = get_from(answers, procs, 600, "bare partitioned step")
            if isinstance(answer, str):
                raise RuntimeError(f"the bare partitioned step failed: {answer}")
            medians.append(float(answer))
        return float(np.mean(medians))
    finally:
        end_processes(procs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("local", "dense", "image-local", "speech"), default="local")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--pairs", type=int, default=1, help="replicas stepping at once (two processes each)")
    args = p.parse_args(argv)
    print(f"bare K = 2 step ({args.model}, {args.pairs} at once): "
          f"{bare_step_ms(args.model, args.steps, pairs=args.pairs):.2f} ms; the whole network's in "
          f"{args.pairs} process{'es' if args.pairs > 1 else ''} at once: "
          f"{bare_step_ms(args.model, args.steps, pairs=args.pairs, whole=True):.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
