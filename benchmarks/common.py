"""What the benchmark scripts share: writing a table as JSON with the machine it ran on, and the two
helpers of the scripts that run bare processes over a raw socket (``raw_wire``, ``bare_downpour``)."""

from __future__ import annotations

import json
import platform
import queue as queues
import socket
import time


def write_json(path: str | None, benchmark: str, payload: dict) -> None:
    """Write ``payload`` to ``path`` (if given) as ``{"benchmark", "machine", **payload}``."""
    if path:
        with open(path, "w") as f:
            json.dump({"benchmark": benchmark, "machine": platform.platform(), **payload}, f, indent=2)


def recv_exactly(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; False if the peer closed first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def get_from(queue, procs: list, timeout: float, what: str = "process"):
    """The next item on ``queue`` (a multiprocessing queue) that one of ``procs`` puts there; a clear
    error at once if one of them died instead, and after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return queue.get(timeout=0.2)
        except queues.Empty:
            dead = [p.exitcode for p in procs if not p.is_alive() and p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"the {what} ended (exit code {dead[0]}) before answering") from None
    raise TimeoutError(f"the {what} did not answer within {timeout:.0f} s")


def end_processes(procs: list, timeout: float = 30) -> None:
    """Join each of ``procs`` (multiprocessing processes), killing one that has not ended in ``timeout`` s."""
    for proc in procs:
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
