"""How soon a run ends after its Dask scheduler dies, against how soon a bare Dask client notices it.

    python benchmarks/scheduler_loss.py [--rounds 3] [--json PATH]

Each round starts a real ``dask scheduler`` and two ``dask worker`` processes
on 127.0.0.1, then ``dbkit run downpour --scheduler ADDRESS --seconds 60``
(the command a user types, with its report) and, beside it, a plain
``distributed.Client`` of the same scheduler in a process of its own (the
floor: no dbkit code). Once the job has placed its shards and trained for 3 s,
the scheduler is killed (SIGKILL); the benchmark times how long the run takes
to exit with its report, and how long the bare client takes to see its
connection go (``client.status`` leaves "running"). The issue's bound for the
run: 10 s.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import write_json

BARE_CLIENT = r"""
import sys, time
from distributed import Client
c = Client(sys.argv[1], timeout=10)
print("ready", flush=True)
sys.stdin.readline()  # the scheduler is killed now
t = time.monotonic()
while c.status == "running" and time.monotonic() - t < 120:
    time.sleep(0.01)
print(f"{time.monotonic() - t:.3f}", flush=True)
"""


def start_dask(folder: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler (its own port, written to a scheduler file) and two workers without nannies."""
    sf = folder / "scheduler.json"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", "0", "--dashboard-address", "127.0.0.1:0", "--scheduler-file", str(sf)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    deadline = time.monotonic() + 60
    while not sf.exists() or not sf.read_text().strip():
        if time.monotonic() > deadline or procs[0].poll() is not None:
            raise RuntimeError("the dask scheduler did not start")
        time.sleep(0.1)
    address = json.loads(sf.read_text())["address"]
    for _ in range(2):
        procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--host",
                                       "127.0.0.1", "--nthreads", "1", "--no-nanny", "--dashboard-address",
                                       "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return address, procs


def shards_placed(address: str) -> None:
    """Return once the job's two shards are placed, and it has trained 3 s more."""
    from distributed import Client

    with Client(address, timeout=10) as c:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            held = c.run(lambda dask_worker: [str(k) for k in dask_worker.state.actors])
            if sum("shard" in k for keys in held.values() for k in keys) >= 2:
                time.sleep(3)
                return
            time.sleep(0.2)
    raise RuntimeError("the job placed no shards within 120 s")


def one_round(folder: Path) -> dict:
    address, procs = start_dask(folder)
    report = folder / "r.json"
    run = subprocess.Popen([sys.executable, "-m", "dbkit.cli.main", "run", "downpour", "--scheduler", address,
                            "--seconds", "60", "--report", str(report), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bare = subprocess.Popen([sys.executable, "-c", BARE_CLIENT, address], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert bare.stdout is not None and bare.stdin is not None
        if bare.stdout.readline().strip() != "ready":
            raise RuntimeError("the bare client did not connect")
        shards_placed(address)
        procs[0].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        bare.stdin.write("\n")
        bare.stdin.flush()
        run.communicate(timeout=120)
        run_s = time.monotonic() - killed
        bare_s = float(bare.communicate(timeout=130)[0].strip())
    finally:
        for p in [run, bare, *procs]:
            if p.poll() is None:
                p.kill()
                p.wait()
    ended = json.loads(report.read_text()).get("ended") if report.exists() else None
    return {"run_s": round(run_s, 3), "bare_client_s": round(bare_s, 3), "exit": run.returncode, "ended": ended}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    for k in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="dbkit-scheduler-loss-") as d:
            row = one_round(Path(d))
        rows.append(row)
        print(f"round {k + 1}: the run ended in {row['run_s']:.2f} s (exit {row['exit']}, {row['ended']}); "
              f"a bare client saw the loss in {row['bare_client_s']:.2f} s", flush=True)
    runs = sorted(r["run_s"] for r in rows)
    bares = sorted(r["bare_client_s"] for r in rows)
    median_run, median_bare = runs[len(runs) // 2], bares[len(bares) // 2]
    print(f"median: the run ends {median_run:.2f} s after its scheduler dies (bound 10 s); a bare Dask client "
          f"notices in {median_bare:.2f} s (the run: {median_run / max(median_bare, 1e-3):.1f}x that)")
    write_json(args.json, "scheduler_loss", {"rounds": rows, "median_run_s": median_run,
                                             "median_bare_client_s": median_bare})


if __name__ == "__main__":
    main()
