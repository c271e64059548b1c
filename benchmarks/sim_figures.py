"""How long the simulated figures take through the command a user types, against the arithmetic they compute.

    python benchmarks/sim_figures.py [--default] [--json F]

Runs ``dbkit simulate fig4 --small`` and ``dbkit simulate fig5 --small`` (with ``--default``, also the paper's
sizes: about 12 and 30 minutes here), each a process of its own writing its report, and records its real
seconds and peak memory. Beside each, in the same run, **the floor**: the gradients its report says its runs
computed (the warm start's and every Downpour run's steps at the batch size, every Sandblaster batch's work
units), with each step's SGD or Adagrad update, as a plain numpy loop of the same MLP on one BLAS thread, no
dbkit class. The floor leaves out the evaluations, the line search's extra batches' bookkeeping and Fig. 5's
cost-only estimates (they compute no gradient), so it is a lower bound: the target of 10 s (``--small``) or
60 s / 120 s (default) is within reach of a faster simulator only where the floor is well under it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import write_json

BATCH, UNIT, HIDDEN, CLASSES = 32, 50, 128, 10  # fig4.Setup's batch_size and sandblaster_unit; the mlp preset


def run_command(figure: str, small: bool, report: Path) -> tuple[float, float]:
    """Real seconds and peak memory (MB) of ``dbkit simulate FIGURE [--small] --report REPORT --quiet``."""
    cmd = [sys.executable, "-m", "dbkit", "simulate", figure, "--report", str(report), "--quiet"]
    if small:
        cmd.insert(5, "--small")
    with tempfile.TemporaryFile("w+") as errors:  # (a pipe read only at the end would stall a chatty child)
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - began
        if os.waitstatus_to_exitcode(status) != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(cmd)} failed: {errors.read()[-4000:]}")
    return seconds, usage.ru_maxrss / 1024


def work(report: dict, n_train: int) -> dict[str, int]:
    """What the figure's runs computed, from its report: gradients of ``BATCH`` examples with an SGD or an
    Adagrad update, and Sandblaster's unit gradients of up to ``UNIT`` examples."""
    sgd, adagrad, units = int(report["warm_start"]["steps"]), 0, 0
    for name, row in report["methods"].items():
        steps = row["steps"] if isinstance(row["steps"], list) else [row["steps"]]
        if name.startswith("Sandblaster"):
            counts = row["replicas"] if isinstance(row["replicas"], list) else [row["replicas"]]
            batches = row["batches"] if isinstance(row["batches"], list) else [row["batches"]]
            for r, b in zip(counts, batches):
                unit = min(UNIT, max(1, n_train // r))
                units += b * math.ceil(n_train / unit) * unit // UNIT  # in gradients of UNIT examples
        elif "Adagrad" in name:
            adagrad += sum(steps)
        else:
            sgd += sum(steps)
    return {"sgd_steps": sgd, "adagrad_steps": adagrad, "unit_gradients": units}


def _gradient(params: list[np.ndarray], grads: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """The MLP's softmax cross-entropy loss and its gradient (into ``grads``), plain numpy."""
    W1, b1, W2, b2 = params
    h = np.maximum(x @ W1 + b1, 0)
    z = h @ W2 + b2
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -float(np.log(p[rows, y]).mean())
    p[rows, y] -= 1.0
    p /= len(y)
    np.matmul(h.T, p, out=grads[2])
    np.sum(p, axis=0, out=grads[3])
    dh = p @ W2.T
    dh[h <= 0] = 0.0
    np.matmul(x.T, dh, out=grads[0])
    np.sum(dh, axis=0, out=grads[1])
    return loss


def floor_seconds(counts: dict[str, int], features: int, sample: int = 1000, repeat: int = 3) -> float:
    """Seconds a plain numpy loop takes for ``counts``' gradients and updates: each kind timed on up to
    ``sample`` of them, the fastest of ``repeat`` rounds, and scaled (a lower bound on a noisy machine)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, features)).astype(np.float32)
    y = rng.integers(0, CLASSES, 20_000)
    shapes = [(features, HIDDEN), (HIDDEN,), (HIDDEN, CLASSES), (CLASSES,)]
    params = [(rng.normal(size=s) * 0.05).astype(np.float32) for s in shapes]
    grads = [np.empty_like(p) for p in params]
    state = [np.full_like(p, 0.1) for p in params]
    total = 0.0
    for kind, n in counts.items():
        k, size = min(n, sample), UNIT if kind == "unit_gradients" else BATCH
        rounds = []
        for _ in range(repeat if k else 0):
            began = time.perf_counter()
            for i in range(k):
                j = (i * size) % (len(y) - size)
                _gradient(params, grads, X[j:j + size], y[j:j + size])
                for p, g, s in zip(params, grads, state):
                    if kind == "adagrad_steps":
                        s += g * g
                        p -= 0.01 * g / np.sqrt(s)
                    elif kind == "sgd_steps":
                        p -= 0.01 * g
            rounds.append(time.perf_counter() - began)
        total += min(rounds) * n / k if k else 0.0
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--default", action="store_true", help="also the paper's sizes (about 12 and 30 minutes here)")
    p.add_argument("--json", default=None, metavar="PATH")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the floor on one BLAS thread, as the simulated replicas
    from threadpoolctl import threadpool_limits

    from dbkit.sim.figures.fig4 import Setup

    rows = []
    with tempfile.TemporaryDirectory() as tmp, threadpool_limits(1):
        for small in ([True, False] if args.default else [True]):
            setup = Setup.small() if small else Setup()
            for figure in ("fig4", "fig5"):
                report_path = Path(tmp) / f"{figure}.json"
                seconds, peak = run_command(figure, small, report_path)
                report = json.loads(report_path.read_text())
                counts = work(report, setup.train_examples)
                floor = floor_seconds(counts, features=40)
                rows.append({"command": f"dbkit simulate {figure}{' --small' if small else ''}", "seconds": seconds,
                             "peak_mb": peak, "floor_seconds": floor, "ratio": seconds / floor if floor else None,
                             "target_seconds": 10.0 if small else (60.0 if figure == "fig4" else 120.0), **counts})
                r = rows[-1]
                print(f"{r['command']}: {seconds:.1f} s, peak {peak:.0f} MB; the plain numpy floor of its "
                      f"{counts['sgd_steps'] + counts['adagrad_steps']:,} steps and {counts['unit_gradients']:,} "
                      f"unit gradients: {floor:.1f} s ({r['ratio']:.1f}x the floor; target {r['target_seconds']:g} s"
                      f" = {r['target_seconds'] / floor:.1f}x the floor)", flush=True)
    write_json(args.json, "sim_figures", {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
