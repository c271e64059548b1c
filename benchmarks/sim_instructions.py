"""Instructions per step of each loop ``sim_speed.py`` times, counted by Valgrind: a measure that does not
drift with this machine's speed.

    python benchmarks/sim_instructions.py [--replicas 200] [--steps 10] [--n 1] [--jobs 2] [--json out.json]

``sim_speed.py``'s timings move by 10-25% between minutes here (the same loop, one process, one minute
apart), which hides a change of a few percent. Valgrind's Cachegrind counts the instructions a process
executes, the same in every run within about 2% (dict order and addresses differ between runs). Each
loop runs twice under it, for 2 and for 2 + ``--steps`` steps per replica; the difference, divided by
the steps taken, is the instructions per step with start-up, imports and set-up taken out. Each count is
given in full and without libc's memcpy/memmove/memset, whose counts depend on the copy routine and
weigh little in time; counts are not times (the simulated replicas run at fewer instructions per cycle
than the plain loop: more of their objects are cold). Needs ``valgrind`` (Debian: ``apt-get install
valgrind``); about 30 s per run here, two runs at a time.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import write_json

HERE = Path(__file__).resolve().parent
BASE_STEPS = 2  # steps per replica of the shorter run, whose count is subtracted
MEMORY_FUNCTIONS = ("memcpy", "memmove", "memset")


def loops(n: int) -> list[str]:
    """The loops counted, in ``sim_speed.py``'s order (the direct loops exist at n = 1 only)."""
    return ["plain", "bare_replicas", *(["direct_replicas"] if n == 1 else []), "same_classes", "simulated"]


def run_one(name: str, replicas: int, steps: int, n: int, profile: str) -> None:
    """Run loop ``name`` of ``sim_speed.py`` for ``steps`` steps per replica (inside Valgrind)."""
    sys.path.insert(0, str(HERE))
    import sim_speed
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        if name == "plain":
            sim_speed.plain_loop(replicas * steps, sim_speed.batch_sizes(replicas))
        elif name == "bare_replicas":
            sim_speed.bare_replicas(replicas, steps, n)
        elif name == "direct_replicas":
            sim_speed.direct_replicas(replicas, steps)
        elif name == "same_classes":
            sim_speed.same_classes(replicas, steps, 1, n)
        elif name == "simulated":
            sim_speed.simulated(replicas, steps, 1, profile, n)
        else:
            raise ValueError(f"no loop named {name!r}; have {loops(1)}")


def counts(path: str | Path) -> tuple[int, int]:
    """``(all instructions, those in libc's memcpy/memmove/memset)`` of a Cachegrind output file."""
    total, memory, in_memory = None, 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("fn="):
                in_memory = any(word in line for word in MEMORY_FUNCTIONS)
            elif line.startswith("summary:"):
                total = int(line.split()[1])
            elif in_memory and line[:1].isdigit():
                memory += int(line.split()[-1])
    if total is None:
        raise ValueError(f"{path}: not a Cachegrind output file (no summary line)")
    return total, memory


def counted(name: str, steps: int, args: argparse.Namespace, work: Path) -> tuple[int, int]:
    """Instructions of loop ``name`` run for ``steps`` steps per replica, under Cachegrind."""
    out = work / f"{name}.{steps}.cg"
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}", sys.executable,
           __file__, "--one", name, "--replicas", str(args.replicas), "--steps", str(steps), "--n", str(args.n),
           "--profile", args.profile]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} under valgrind failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    return counts(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--replicas", type=int, default=200)
    p.add_argument("--steps", type=int, default=10, help="steps per replica counted (default: %(default)s)")
    p.add_argument("--n", type=int, default=1, help="n_fetch = n_push (default: %(default)s)")
    p.add_argument("--profile", default="distbelief-2012")
    p.add_argument("--jobs", type=int, default=2, help="Valgrind runs at a time (default: %(default)s)")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # run one loop (what Valgrind runs)
    args = p.parse_args(argv)
    if args.one:
        run_one(args.one, args.replicas, args.steps, args.n, args.profile)
        return 0
    if args.steps < 1 or args.replicas < 1 or args.jobs < 1:
        p.error("--steps, --replicas and --jobs must be at least 1")
    if shutil.which("valgrind") is None:
        p.error("valgrind is not on PATH (Debian: apt-get install valgrind)")
    names = loops(args.n)
    with tempfile.TemporaryDirectory(prefix="dbkit-instructions-") as tmp, ThreadPoolExecutor(args.jobs) as pool:
        runs = {(name, s): pool.submit(counted, name, s, args, Path(tmp))
                for name in names for s in (BASE_STEPS, BASE_STEPS + args.steps)}
        results = {key: future.result() for key, future in runs.items()}
    per_step = args.replicas * args.steps
    rows = {}
    for name in names:
        (short, short_mem), (long, long_mem) = results[name, BASE_STEPS], results[name, BASE_STEPS + args.steps]
        rows[name] = {"instructions": (long - short) / per_step,
                      "without_memory": ((long - long_mem) - (short - short_mem)) / per_step}
    plain = rows["plain"]
    for name, row in rows.items():
        row["of_plain"] = row["instructions"] / plain["instructions"]
        row["without_memory_of_plain"] = row["without_memory"] / plain["without_memory"]
        print(f"{name:16s} {row['instructions']:12,.0f} instructions per step ({row['of_plain']:.2f}x the plain "
              f"loop); without memcpy/memset {row['without_memory']:10,.0f} ({row['without_memory_of_plain']:.2f}x)")
    write_json(args.json, "sim_instructions", {"replicas": args.replicas, "steps": args.steps, "n": args.n,
                                               "profile": args.profile, "python": sys.version.split()[0],
                                               "loops": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
