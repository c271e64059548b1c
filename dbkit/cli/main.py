"""``dbkit``: run DistBelief-style training from the command line.

    dbkit demo                         # the default job on an embedded LocalCluster
    dbkit run sgd --dataset digits --report out/sgd.json --plot out/sgd.png
    dbkit run downpour --replicas 3 --shards 2 --optimizer adagrad --n-fetch 2 --n-push 2
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

from ..data import DataError, small
from ..extensions import extensions_in, load_extension
from ..runtime.dask.worker_processes import quiet_dask
from .emulate import add_parser as add_emulate_parser
from .emulate import run as emulate_from_args
from .options import add_run_options, add_sandblaster_options, config_from_args
from .paths import check_outputs, check_writable
from .signals import end_now, stop_signals
from .simulate import FIGURES, calibrate_from_args, figure_from_args, print_figure, simulate_from_args
from .simulate import add_parsers as add_simulate_parsers

EPILOG = """Paper: Dean et al., "Large Scale Distributed Deep Networks", NIPS 2012.
Set DBKIT_SMALL=1 for small, quick sizes (CI, Binder)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dbkit", description="DistBelief on Dask: run, watch and compare "
                                "distributed training algorithms.", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="{run,demo,simulate,calibrate,emulate}")
    run = sub.add_parser("run", help="train with one algorithm and write a JSON report")
    algos = run.add_subparsers(dest="algorithm", required=True, metavar="{sgd,downpour,sandblaster}")
    raw: dict[str, Any] = {"formatter_class": argparse.RawDescriptionHelpFormatter}  # registered rules: a line each
    sgd = algos.add_parser("sgd", **raw, help="synchronous mini-batch SGD, the single-process baseline",
                           description=_wrap("Plain mini-batch SGD (or Adagrad) in one process: the baseline every "
                           "distributed algorithm is compared to. With --on-cluster the parameters live on "
                           "--shards parameter shard actors instead, and every step fetches and pushes."))
    add_run_options(sgd)
    sgd.add_argument("--on-cluster", action="store_true",
                     help="keep the parameters on shard actors on a Dask cluster (LocalCluster or --scheduler)")
    downpour = algos.add_parser(
        "downpour", **raw, help="Downpour SGD: asynchronous replicas and a sharded parameter server (paper Sec. 4.1)",
        description=_wrap("Asynchronous Downpour SGD: --replicas model replicas, each on its own data shard, fetch "
        "parameters every --n-fetch steps and push accumulated gradients every --n-push steps to --shards "
        "parameter shards, which apply SGD or Adagrad (or a registered rule). --warm-start-steps lets one "
        "replica train alone first. --replica runs another replica loop (DiLoCo, or a registered one)."))
    add_run_options(downpour, replica=True)
    downpour.set_defaults(replicas=2, shards=2, optimizer="adagrad")
    sandblaster = algos.add_parser(
        "sandblaster", **raw,
        help="Sandblaster L-BFGS: a coordinator, history on the shards, work units (paper Sec. 4.2)",
        description=_wrap("Batch L-BFGS: a coordinator drives L-BFGS with commands to the parameter shards, which "
        "keep the parameters and the (s, y) history; each batch gradient is cut into small work units handed to "
        "--replicas replicas as they become free, with backup copies near the end of a batch."))
    add_run_options(sandblaster)
    add_sandblaster_options(sandblaster)
    sandblaster.set_defaults(replicas=3, shards=2, model="linear", l2=1e-3)
    demo = sub.add_parser("demo", help="the default job on an embedded LocalCluster, with report and plot",
                          description="Runs Downpour SGD with Adagrad (3 replicas, 2 parameter shards) on a "
                          "2-worker LocalCluster, on the bundled digits, and writes a report and a plot.")
    demo.add_argument("--out", default="dbkit-demo", help="folder for report.json and plot.png (default: %(default)s)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    add_simulate_parsers(sub)
    add_emulate_parser(sub)
    return p


def _wrap(text: str) -> str:
    return textwrap.fill(text, 100)


def _write_outputs(report: dict, report_path: str | None, plot_path: str | None) -> None:
    from ..telemetry import plot_history, write_report

    if report_path:
        print(f"report: {write_report(report, report_path)}")
    if plot_path:
        title = f"{report['algorithm']} on {report['config']['dataset']} ({report['config']['model']})"
        if report.get("simulated"):
            title = f"simulated ({report['profile']} profile): {title}"
        print(f"plot: {plot_history(report['history'], plot_path, title)}")


def _figure(args: argparse.Namespace) -> int:
    """``dbkit simulate fig3|fig4|fig5``: the figure's report and PNG."""
    from ..sim.figures import plot_figure
    from ..telemetry import write_report

    check_outputs({"--report": args.report, "--plot": args.plot}, args)
    for flag, path in (("--report", args.report), ("--plot", args.plot)):
        check_writable(flag, path)
    report = figure_from_args(args)
    print_figure(report)
    if args.report:
        print(f"report: {write_report(report, args.report)}")
    if args.plot:
        print(f"plot: {plot_figure(report, args.plot)}")
    return 0


def _diverged(report: dict) -> str | None:
    """Why the run ended diverged (exit status 3), or ``None``: its state says so, or its final model's
    training or test loss is not finite, or is over :data:`GROWTH` times max(1, its loss at step 0); the
    floor of 1 keeps a warm start, whose start loss is small, from counting a little noise as divergence.
    Downpour's shards refuse non-finite steps, so its replicas go on stepping on parameters grown too large
    for a sane loss; a stable log-softmax keeps that loss finite but huge."""
    if report.get("cost_only"):  # no arrays, so no loss to judge by
        return None
    final = report.get("final") or {}
    lr = (report.get("config") or {}).get("lr")
    advice = f"; lower the learning rate (lr={lr}) or use Adagrad" if lr is not None else ""
    if report.get("state") == "diverged":
        return "every replica stopped on a non-finite loss or gradient" + advice
    keys = [k for k in ("train_loss", "test_loss") if k in final]
    if keys and not any(_finite(final.get(k)) for k in keys):
        return "the final model's loss is not finite" + advice
    for k in keys:
        start = next((row.get(k) for row in report.get("history") or [] if _finite(row.get(k))), None)
        end = final.get(k)
        if start is not None and _finite(end) and end > GROWTH * max(start, 1.0):
            return (f"the final model's {k.replace('_', ' ')} ({end:.4g}) is over {GROWTH:g} times "
                    f"max(1, its loss at the start, {start:.4g})" + advice)
    return None


GROWTH = 10.0
"""A final loss over this many times max(1, the loss at the start) counts as diverged."""


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:  # before the parser: what they register joins its choices and flags
        for source in extensions_in(argv):
            load_extension(source)
    except ValueError as e:
        print(f"dbkit: error: {e}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    if args.command == "emulate":
        return emulate_from_args(args)
    if args.command != "simulate" and getattr(args, "runtime", "dask") == "dask":
        quiet_dask()  # only where Dask runs: a simulation, or a run on in-process workers, loads none of it
    from ..config import RunConfig
    from ..runner import run
    from .summary import print_summary

    try:
        if args.command == "calibrate":
            if args.out:
                check_writable("--out", args.out)
            return calibrate_from_args(args)
        if args.command == "demo":
            steps = 800 if small() else 3000
            config = RunConfig.make(algorithm="downpour", dataset="digits", model="mlp", steps=steps, replicas=3,
                                    shards=2, optimizer="adagrad", lr=0.05, eval_every=max(1, steps // 20))
            print(f"dbkit demo: Downpour SGD with Adagrad, 3 replicas and 2 parameter shards on a LocalCluster, "
                  f"{steps} steps in all")
            report_path, plot_path = str(Path(args.out) / "report.json"), str(Path(args.out) / "plot.png")
        elif args.command == "simulate" and args.kind in FIGURES:
            return _figure(args)
        elif args.command == "simulate":
            report_path, plot_path = args.report, args.plot
        else:
            config = config_from_args(args, args.algorithm)
            report_path, plot_path = args.report, args.plot
        check_outputs({"--report": report_path, "--plot": plot_path}, args)
        for flag, path in (("--report", report_path), ("--plot", plot_path)):
            check_writable(flag, path)  # before training, not after it
        with stop_signals() as presses:  # also while the report is written: a second Ctrl-C keeps it
            if args.command == "simulate":
                report = simulate_from_args(args, progress=not args.quiet)
            else:
                report = run(config, progress=not args.quiet, resume=getattr(args, "resume", None),
                             full_report=getattr(args, "full_report", False))
            print_summary(report, rows=not (args.command == "simulate" and args.quiet))
            _write_outputs(report, report_path, plot_path)
            presses.reported = True
        if report.get("interrupted"):
            status = 143 if report.get("signal") == "SIGTERM" else 130
            if presses.names and threading.current_thread() is threading.main_thread():
                end_now(status)  # the command line's own process: no finalization for a late Ctrl-C to kill
            return status
        if report.get("error") or report.get("state") == "failed":  # the report is written; say why in one line
            errors = [e["message"] for e in report.get("events", []) if e.get("type") == "ErrorEvent"]
            failed = [f"replica {r.get('replica')}: {r['error']}" for r in report.get("replicas") or []
                      if r.get("state") == "failed" and r.get("error")]
            why = report.get("error") or (errors[-1] if errors else "; ".join(failed[:3]) or "see the report")
            print(f"dbkit: the run failed: {why}", file=sys.stderr)
            return 1
        if _diverged(report):
            print(f"dbkit: the run diverged: {_diverged(report)}", file=sys.stderr)
            return 3
        return 0
    except (ValueError, DataError, OSError) as e:
        print(f"dbkit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # before anything ran (or while it is set up): nothing to report
        name = getattr(e, "signal_name", "SIGINT")
        print(f"dbkit: interrupted ({name}) before the run began: no report", file=sys.stderr)
        return 143 if name == "SIGTERM" else 130
    except Exception as e:  # noqa: BLE001 - the command line never ends in a traceback
        print(f"dbkit: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
