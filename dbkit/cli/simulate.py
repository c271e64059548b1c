"""``dbkit simulate``: a Downpour or Sandblaster run in virtual time on simulated machines.

    dbkit simulate downpour --replicas 200 --shards 20 --profile distbelief-2012 --report out/sim.json
    dbkit simulate sandblaster --replicas 2000 --profile distbelief-2012 --report out/sb.json

The flags are ``dbkit run``'s, plus ``--machines``, ``--profile`` and
``--cost-only``; the report is ``dbkit run``'s, marked ``"simulated": true``.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .options import DEFAULTS, add_run_options, add_sandblaster_options, config_from_args

EPILOG = """Simulated: only time is modelled. With numerics (the default) the gradients, staleness and Adagrad
are dbkit's own; the profile says what each computation and message costs (here: this machine as
calibrated by `dbkit calibrate`; distbelief-2012: shaped like the paper's cluster)."""


def add_simulation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("simulation")
    g.add_argument("--profile", default="here", metavar="NAME_OR_PATH",
                   help="machines, network and arithmetic: here (this machine, as last calibrated), distbelief-2012 "
                        "(shaped like the paper's cluster) or a profile JSON file (default: %(default)s)")
    g.add_argument("--machines", type=int, default=None, metavar="N",
                   help="simulated machines shared round-robin by shards and replicas; default: the profile's "
                        "(here: the 2 workers of dbkit run's LocalCluster; distbelief-2012: a machine for every "
                        "shard and every replica partition)")
    g.add_argument("--cost-only", action="store_true",
                   help="no arrays: time and bytes from the model's shape only (models of billions of parameters); "
                        "the report has no losses or accuracies")
    g.add_argument("--seeds", type=int, default=None, metavar="K",
                   help="run K seeds (--seed, --seed + 1, ...), each with computation times drawn around the "
                        "modelled ones, and give each figure's spread (mean, sd, least, greatest)")
    g.add_argument("--shape", default=None, metavar="NAME",
                   help="charge the time of a paper-shaped model instead of --model's own: speech-42m, image-80m, "
                        "image-330m or image-1.7b")


def add_parsers(sub: Any) -> None:
    """``dbkit simulate {downpour,sandblaster}`` and ``dbkit calibrate``."""
    cal = sub.add_parser("calibrate", help="measure this machine for the simulator's 'here' profile",
                         description="Measures this machine (each preset's arithmetic, a shard's service, the shard "
                         "wire between two processes, Dask's control plane on a LocalCluster) for the simulator; "
                         "about a minute and a half on an idle machine (--quick: about half). A probe timed "
                         "before and after says whether the machine was steady: if not, nothing is written "
                         "(--force writes it with a warning).")
    cal.add_argument("--out", default=None, metavar="PATH",
                     help="write the profile to this JSON file (default: a dated file in the profiles folder, "
                          "used with --profile PATH)")
    cal.add_argument("--replace-here", action="store_true",
                     help="make it this machine's 'here' profile (the default profile of dbkit simulate)")
    cal.add_argument("--force", action="store_true",
                     help="write the profile even if the machine was too busy to measure it (with a warning "
                          "that every simulation on it repeats)")
    cal.add_argument("--quick", action="store_true", help="fewer repetitions")
    sim = sub.add_parser("simulate", help="run Downpour or Sandblaster on simulated machines, in virtual time",
                         description="Runs dbkit's own replicas, shards and coordinator in virtual time on simulated "
                         "machines, at the paper's scale, and writes the same report as dbkit run.", epilog=EPILOG)
    kinds = sim.add_subparsers(dest="kind", required=True, metavar="{downpour,sandblaster,fig3,fig4,fig5}")
    d = kinds.add_parser("downpour", help="Downpour SGD on simulated machines (paper Sec. 4.1)",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(d, replica=True, simulated=True)
    add_simulation_options(d)
    d.set_defaults(replicas=2, shards=2, optimizer="adagrad")
    s = kinds.add_parser("sandblaster", help="Sandblaster L-BFGS on simulated machines (paper Sec. 4.2)",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_options(s, simulated=True)
    add_sandblaster_options(s)
    add_simulation_options(s)
    s.set_defaults(replicas=3, shards=2, model="linear", l2=1e-3)
    for kind, what in FIGURES.items():
        f = kinds.add_parser(kind, help=what, description=f"{what}; simulated, beside the paper's numbers. Writes "
                             "a JSON report (--report) and a PNG (--plot).", epilog=EPILOG)
        f.add_argument("--profile", default="distbelief-2012", metavar="NAME_OR_PATH",
                       help="the simulated cluster (default: %(default)s)")
        f.add_argument("--report", default=None, metavar="PATH", help="write the figure's JSON report here")
        f.add_argument("--plot", default=None, metavar="PATH", help="draw the figure to this PNG")
        f.add_argument("--quiet", action="store_true", help="no progress lines")
        if kind == "fig3":
            f.add_argument("--batch", type=int, default=128, help="examples per mini-batch (default: %(default)s)")
        else:
            f.add_argument("--small", action="store_true",
                           help="a quick version: fewer examples, replicas and seconds (also DBKIT_SMALL=1)")


FIGURES = {"fig3": "speed-up against machines per model (cost-only; DistBelief Fig. 3)",
           "fig4": "test accuracy against time, per method (with numerics; DistBelief Fig. 4)",
           "fig5": "time to a fixed accuracy against machines, per method (with numerics; DistBelief Fig. 5)"}


def figure_from_args(args: argparse.Namespace) -> dict:
    """The figure the flags name: its report (written and drawn as the flags say, by the caller)."""
    from ..data import small
    from ..sim.figures import SMALL_SWEEP, Setup, figure3, figure4, figure5

    say = (lambda line: None) if args.quiet else (lambda line: print(line, flush=True))
    if args.kind == "fig3":
        return figure3(args.profile, batch=args.batch)
    setup = dataclasses.replace(Setup.small() if (args.small or small()) else Setup(), profile=args.profile)
    if args.kind == "fig4":
        return figure4(setup, progress=say)
    return figure5(setup, SMALL_SWEEP if (args.small or small()) else None, progress=say)


def print_figure(report: dict) -> None:
    """What the figure shows, in a few lines, each simulated number labelled as such."""
    print(f"simulated ({report['profile']} profile), {report['figure']}:")
    if report["figure"] == "fig3":
        for name, m in report["models"].items():
            best = max(range(len(m["speedup"])), key=lambda i: m["speedup"][i])
            print(f"  {name}: best {m['speedup'][best]:.1f}x at {m['machines'][best]} machines"
                  + (f"; {m['speedup'][m['machines'].index(81)]:.1f}x at 81" if 81 in m["machines"] else ""))
        for p in report["paper"]["points"]:
            print(f"  {p['label']}")
    elif report["figure"] == "fig4":
        for name, m in report["methods"].items():
            t = m["time_to_target"]
            print(f"  {name}: " + (f"accuracy {report['target']:g} at {t:.3f} s" if t is not None else
                                   f"did not reach {report['target']:g}"))
        print("  simulated order, slowest to fastest: " + ", ".join(report["order_slowest_to_fastest"]))
        print("  paper's order: " + ", ".join(report["paper"]["order_slowest_to_fastest"]))
    else:
        for name, m in report["methods"].items():
            cells = [f"{k} machines: " + (f"{t:.3f} s" if t is not None else "-")
                     for k, t in zip(m["machines"], m["time_to_target"])]
            print(f"  {name}: " + "; ".join(cells))
        for name, m in report.get("estimated", {}).items():
            cells = [f"{k:,} machines: about {t:.3f} s" for k, t in zip(m["machines"], m["time_to_target"])]
            print(f"  {name}, estimated from cost-only runs: " + "; ".join(cells))
    for note in report.get("differences", []):
        print(f"  differs from the paper: {note}")


NOT_SIMULATED = (("scheduler", None, "--scheduler"), ("checkpoint_dir", None, "--checkpoint-dir"),
                 ("resume", None, "--resume"), ("restart_replicas", True, "--no-restart-replicas"),
                 ("transport", DEFAULTS.downpour.transport, "--transport"), ("runtime", DEFAULTS.runtime, "--runtime"),
                 ("checkpoint_every", DEFAULTS.checkpoint_every, "--checkpoint-every"),
                 ("heartbeat_timeout", DEFAULTS.heartbeat_timeout, "--heartbeat-timeout"))


def calibrate_from_args(args: argparse.Namespace) -> int:
    """Measure, save as the ``here`` profile (and to ``--out``), print what was measured; exit status."""
    import sys
    from datetime import datetime

    from ..calibration import calibrate as measuring
    from ..calibration import control_plane, noise
    from ..ps.checkpoint import probe_writable
    from ..runtime.sim.profile import noise_warning, user_folder, write

    if not args.out or args.replace_here:  # where it will write, checked before minutes of measuring (#48)
        try:
            probe_writable(user_folder())
        except OSError as e:
            raise ValueError(f"calibrate would write to {user_folder()} (DBKIT_PROFILES, or ~/.config/dbkit/profiles) "
                             f"but cannot ({e.strerror or e}); give --out PATH or a writable DBKIT_PROFILES") from e
    began = datetime.now()
    load = noise.machine_load()
    before = noise.probe()
    print("Dask's control plane on a 2-worker LocalCluster ...")
    control, worker_steps, host_load, real_steps = control_plane.time_control_plane(args.quick)
    profile = measuring.calibrate(control, worker_steps, host_load, real_steps, quick=args.quick)
    steady = noise.Noise.of(before, noise.probe(), load)
    profile = dataclasses.replace(profile, measured={**profile.measured, "noise": steady.to_dict()})
    problem = steady.problem()
    if problem and not args.force:
        print(f"dbkit: calibrate: the machine was too busy to measure ({problem}); no profile written: run it "
              "again on an idle machine, or give --force to write it with a warning", file=sys.stderr)
        return 1
    out = args.out or (None if args.replace_here else
                       str(user_folder() / f"here-{began.strftime('%Y%m%d-%H%M%S')}.json"))
    paths = ([write(profile, out)] if out else []) + (
        [write(profile, user_folder() / "here.json")] if args.replace_here else [])
    c, m = profile.compute, profile.message
    for key, (a, b) in sorted(profile.measured["gradients"].items()):
        print(f"  gradient of {key}: {a * 1e3:.3f} ms + {b * 1e6:.2f} us per example")
    print(f"  a replica's own work per step: {c.replica_step_seconds * 1e6:.1f} us + "
          f"{c.update_seconds_per_parameter * 1e9:.2f} ns per parameter; in a Dask worker everything takes "
          f"{profile.machine.cpu_factor:.2f}x a bare process's time; each other replica on a worker adds "
          f"{c.contention:.0%} to a step")
    real = profile.measured["fit"]["real"]
    print(f"  fitted to real steps of the digits MLP ({real['1'] * 1e6:.0f} us exchanging every step, "
          f"{real['16'] * 1e6:.0f} us every 16th): arithmetic x{profile.machine.cpu_factor:.2f}, "
          f"exchanges x{profile.message.wire_scale:.2f} the rig's")
    fit = profile.measured["fit"]
    if "speech_real" in fit:
        print(f"  megabyte messages fitted to a real step of the speech preset ({fit['speech_real']['1'] * 1e3:.1f} ms "
              f"exchanging every step): x{fit['large_message_scale']:.2f} the rig's")
    print(f"  the driver and scheduler keep {profile.machine.host_load:.2f} of the host's "
          f"{profile.machine.host_cores} cores busy while replicas train")
    for size, client, server, local in profile.measured["wire_cpu"]:
        print(f"  a message of {size / 1e3:,.0f} kB: {client * 1e6:.0f} us of the caller's CPU, {server * 1e6:.0f} us "
              f"of the remote shard's worker's; {local * 1e6:.0f} us to a shard on the caller's own worker")
    print(f"  an actor command {m.control_seconds * 1e3:.2f} ms, a task {m.task_seconds * 1e3:.2f} ms, a boundary "
          f"message {m.partition_message_seconds * 1e3:.2f} ms (one way)")
    print(f"  the probe's times spread {steady.spread:.0%} and drifted {steady.drift:.0%} (load {steady.load:.1f} "
          f"on {steady.cores} cores); took {(datetime.now() - began).total_seconds():.0f} s")
    print("profile: " + ", ".join(str(p) for p in paths) + ("" if args.replace_here else
          f" (use it with --profile {paths[0]}; --replace-here makes it the 'here' profile)"))
    warning = noise_warning(profile)
    if warning:
        print(warning, file=sys.stderr)
    return 0


def simulate_from_args(args: argparse.Namespace, progress: bool = True) -> dict:
    """Run the simulation the flags describe; its report."""
    import sys

    from ..runtime.sim.profile import noise_warning
    from ..sim import Cluster, simulated_run
    from ..sim.figures.ticker import RunTicker

    for attr, default, flag in NOT_SIMULATED:
        if getattr(args, attr, default) != default:
            raise ValueError(f"{flag} does not apply to a simulation: it runs no Dask cluster and loses no machine")
    machines = args.machines if args.machines is not None else (
        args.workers if args.workers != DEFAULTS.workers else None)
    cluster = Cluster(args.profile, machines)
    config = config_from_args(args, args.kind)
    if progress:
        print(cluster.describe())
    warning = noise_warning(cluster.spec)
    if warning:  # a profile written on a busy machine: said every time it is used
        print(warning, file=sys.stderr)
    if args.seeds is not None:
        from ..sim.seeds import over_seeds

        def say(line: str) -> None:
            if progress:
                print(f"  {line}", flush=True)

        return over_seeds(config, cluster, args.seeds, say, shape=args.shape, cost_only=args.cost_only)
    run = simulated_run(config, cluster, shape=args.shape, cost_only=args.cost_only)
    run.full_report = args.full_report
    if progress:  # a line every few seconds of computing: how far the run has got, and how far it has to go
        run.on_progress = RunTicker(print, config.algorithm, config.steps, config.seconds)
    try:
        return run.run()
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as the command line turns it into one: what ran
        name = getattr(e, "signal_name", "SIGINT")
        print(f"interrupted ({name}): stopped, reporting what was simulated", flush=True)
        return {**run.report(), "interrupted": True, "signal": name}
