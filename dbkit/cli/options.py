"""The ``dbkit`` command's flags, named and explained in the paper's words."""

from __future__ import annotations

import argparse
import textwrap

from ..config import MODELS, RunConfig
from ..downpour.replica_kinds import describe_replicas, registered_replicas
from ..ps.update_rule import describe_rules, registered_rules
from ..settings import KNOBS, RUNTIMES, SETTINGS, TRANSPORTS

DEFAULTS = RunConfig()


def _hidden(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in text.split(","))  # an empty width (``1,,2``) is refused, not skipped
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--hidden takes comma-separated widths such as 256,256, got {text!r}") from None
    if not widths or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"--hidden widths must be >= 1, got {text!r}")
    return widths


def add_run_options(p: argparse.ArgumentParser, replica: bool = False, simulated: bool = False) -> None:
    """Flags shared by every algorithm (DESIGN.md, CLI contract); with ``replica``, Downpour's ``--replica``.
    ``simulated`` (``dbkit simulate``): the flags of a real cluster (its scheduler, workers, runtime, wire,
    checkpoints) are still read, so that giving one is refused with its reason, but the help leaves them out."""
    d = DEFAULTS

    def real(text: str) -> str:
        return argparse.SUPPRESS if simulated else text

    g = p.add_argument_group("data and model")
    g.add_argument("--dataset", default=d.dataset, metavar="NAME_OR_PATH",
                   help="digits (bundled, default), signals (MNIST-1D-style 1-D signals), synthetic, "
                        "speech (11x40 frames), "
                        "or a local .npz with X_train y_train X_test y_test, or a folder of MNIST IDX files")
    g.add_argument("--model", default=d.model, choices=MODELS,
                   help="network preset: linear = softmax regression; mlp = ReLU layers of --hidden; "
                        "speech = the paper's speech net scaled down (4 sigmoid layers); "
                        "image-local = locally connected image net; signal-local = locally connected 1-D net "
                        "for signals (default: %(default)s)")
    g.add_argument("--hidden", type=_hidden, default=None, metavar="W1,W2",
                   help="hidden layer widths for mlp and speech, e.g. 256,256")
    g.add_argument("--l2", type=float, default=d.l2, help="L2 weight: loss + (l2/2)*||W||^2 (default: %(default)s)")
    g.add_argument("--max-data-gib", type=float, default=d.max_data_gib, metavar="GIB",
                   help="refuse a --dataset file whose arrays take more than this, decompressed (default: "
                        "%(default)s)")
    t = p.add_argument_group("training")
    t.add_argument("--optimizer", choices=registered_rules(), default=d.optimizer,
                   help="update rule applied where the parameters live; Adagrad keeps its per-parameter "
                        "accumulators on the parameter shards (paper Sec. 4.1); the rules registered, with their "
                        "own settings, are listed below (default: %(default)s)")
    t.add_argument("--lr", type=float, default=d.lr, help="learning rate (default: %(default)s)")
    t.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="examples per mini-batch (default: %(default)s)")
    t.add_argument("--steps", type=int, default=None,
                   help=f"training steps (default: {d.steps} if --seconds is not given)")
    t.add_argument("--seconds", type=float, default=None, help="train for this long instead of a number of steps")
    t.add_argument("--eval-every", type=int, default=d.eval_every,
                   help="steps between evaluations (default: %(default)s)")
    t.add_argument("--target-accuracy", type=float, default=None, metavar="A",
                   help="report the time to reach this test accuracy (the paper's Fig. 4 and 5); the report "
                        "always gives the times to 30%%, 40%%, ... 99%%")
    t.add_argument("--seed", type=int, default=d.seed, help="seed for initialisation, data order and splits")
    s = p.add_argument_group("DistBelief (paper Sec. 4)")
    s.add_argument("--replicas", type=int, default=d.replicas,
                   help="model replicas, each training on its own data shard (default: %(default)s)")
    s.add_argument("--shards", type=int, default=d.shards,
                   help="parameter server shards, each owning a slice of the parameters (default: %(default)s)")
    s.add_argument("--partitions", type=int, default=d.downpour.partitions,
                   help="machines one replica's network is split across (model parallelism) (default: %(default)s)")
    s.add_argument("--n-fetch", type=int, default=d.downpour.n_fetch,
                   help="a replica fetches fresh parameters every n_fetch steps (default: %(default)s)")
    s.add_argument("--n-push", type=int, default=d.downpour.n_push,
                   help="a replica pushes its accumulated gradient every n_push steps (default: %(default)s)")
    s.add_argument("--no-overlap", dest="overlap", action="store_false",
                   help="replicas wait for every fetch and push instead of computing on meanwhile (the paper's "
                        "client overlaps them; compare the two)")
    s.add_argument("--transport", choices=TRANSPORTS, default=d.downpour.transport,
                   help=real("how replicas fetch from and push to shards on other workers: socket, their own TCP "
                        "connection (off by itself on a TLS cluster), or actor, Dask actor calls "
                        "(default: %(default)s)"))
    s.add_argument("--slow-replica", type=_slow, action="append", default=[], metavar="I:FACTOR",
                   help="make replica I FACTOR times slower (repeatable): a straggler, to watch Downpour go on "
                        "without waiting and Sandblaster's load balancing and backups")
    s.add_argument("--warm-start-steps", type=int, default=d.downpour.warm_start_steps,
                   help="warm start: one replica trains alone this many steps before the others join")
    add_extension_options(p, replica)
    c = p.add_argument_group("cluster")
    c.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help=real("address of a running Dask scheduler (tcp://HOST:PORT); default: start a LocalCluster"))
    c.add_argument("--workers", type=int, default=d.workers,
                   help=real("workers dbkit starts: LocalCluster processes, or in-process workers "
                             "(default: %(default)s)"))
    c.add_argument("--runtime", choices=RUNTIMES, default=d.runtime,
                   help=real("where the workers run: dask, or in-process (threads of this process, no Dask; "
                        "default: %(default)s)"))
    f = p.add_argument_group("faults (a lost machine)")
    f.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help=real("the parameter shards checkpoint here (on a real cluster: a folder every machine "
                        "shares); a shard lost with its worker comes back from it (Downpour, Sandblaster)"))
    f.add_argument("--checkpoint-every", type=float, default=d.checkpoint_every, metavar="SECONDS",
                   help=real("seconds between checkpoints (default: %(default)s)"))
    f.add_argument("--resume", default=None, metavar="DIR",
                   help=real("start from the checkpoint in DIR (the same model and layout; Downpour, Sandblaster)"))
    f.add_argument("--heartbeat-timeout", type=float, default=d.heartbeat_timeout, metavar="SECONDS",
                   help=real("a machine whose parameter shard does not answer for this long counts as hung: it is "
                        "dropped and its shards come back from the checkpoint (default: %(default)s)"))
    f.add_argument("--no-restart-replicas", dest="restart_replicas", action="store_false",
                   help=real("do not replace a replica whose worker was lost"))
    o = p.add_argument_group("output")
    o.add_argument("--report", default=None, metavar="PATH", help="write the JSON run report here")
    o.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of loss and accuracy against time here")
    o.add_argument("--full-report", action="store_true",
                   help="keep a row per replica in every sample of the report's events (beyond 48 replicas "
                        "they are summarised: a 500-replica report would run to tens of megabytes)")
    o.add_argument("--quiet", action="store_true",
                   help="print only the summary: no progress lines, no row per replica or shard" if simulated
                   else "no progress bar")


def add_extension_options(p: argparse.ArgumentParser, replica: bool = False) -> None:
    """``--extension``, ``--replica`` (with ``replica``: Downpour's) and a flag for every registered knob, with
    the registered update rules and replica loops listed in the help."""
    g = p.add_argument_group(
        "update rules and replica loops (registered; dbkit.ps.update_rule, dbkit.downpour.replica_kinds)",
        "update rules (--optimizer):\n" + _indent(describe_rules())
        + ("\nreplica loops (--replica):\n" + _indent(describe_replicas()) if replica else ""))
    g.add_argument("--extension", action="append", default=[], metavar="FILE_OR_MODULE",
                   help="import a .py file or module that registers rules or loops of your own first (repeatable)")
    if replica:
        g.add_argument("--replica", choices=registered_replicas(), default=DEFAULTS.downpour.replica,
                       help="what each replica does between exchanges with the shards (default: %(default)s)")
    for s in SETTINGS.values():
        if s.section == KNOBS:
            kind: dict = ({"type": int} if s.kind == "int" else {"type": float} if s.kind == "float"
                          else {"choices": s.choices} if s.kind == "choice" else {"type": str})
            g.add_argument(f"--{s.name.replace('_', '-')}", dest=f"knob_{s.name}", default=None,
                           metavar=None if s.kind == "choice" else s.name.upper(),
                           help=f"{s.help} ({s.allowed()})", **kind)


def _indent(text: str) -> str:
    return "\n".join(textwrap.fill(line, 100, initial_indent="  ", subsequent_indent="      ")
                     for line in text.splitlines())


def _knobs(args: argparse.Namespace) -> dict:
    """The knobs given on the command line (``knob_NAME`` attributes that are set)."""
    return {k[len("knob_"):]: v for k, v in vars(args).items() if k.startswith("knob_") and v is not None}


def _slow(text: str) -> tuple[int, float]:
    try:
        index, factor = text.split(":")
        return int(index), float(factor)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--slow-replica takes INDEX:FACTOR such as 0:10, got {text!r}") from None


def add_sandblaster_options(p: argparse.ArgumentParser) -> None:
    """Sandblaster L-BFGS's own flags (paper Sec. 4.2)."""
    d = DEFAULTS
    g = p.add_argument_group("Sandblaster L-BFGS (paper Sec. 4.2)")
    g.add_argument("--memory", type=int, default=d.sandblaster.memory,
                   help="L-BFGS history pairs (s, y) kept on the parameter shards (default: %(default)s)")
    g.add_argument("--iterations", type=int, default=d.sandblaster.iterations,
                   help="at most this many L-BFGS iterations (default: %(default)s)")
    g.add_argument("--work-unit-size", type=int, default=d.sandblaster.work_unit_size,
                   help="examples per work unit; 0 = about a tenth of the batch per replica (default)")
    g.add_argument("--no-backup", dest="backup", action="store_false",
                   help="do not schedule backup copies of running units near the end of a batch")
    g.add_argument("--no-balance", dest="balance", action="store_false",
                   help="split the units equally up front instead of handing them out as replicas free up")


def config_from_args(args: argparse.Namespace, algorithm: str) -> RunConfig:
    """Map parsed flags onto a validated ``RunConfig`` (each in its section)."""
    steps = args.steps if (args.steps is not None or args.seconds is not None) else DEFAULTS.steps
    flat = dict(algorithm=algorithm, dataset=args.dataset, model=args.model, hidden=args.hidden, l2=args.l2,
                max_data_gib=args.max_data_gib,
                batch_size=args.batch_size, lr=args.lr, optimizer=args.optimizer, steps=steps, seconds=args.seconds,
                seed=args.seed, eval_every=args.eval_every, target_accuracy=args.target_accuracy,
                replicas=args.replicas, shards=args.shards,
                partitions=args.partitions, n_fetch=args.n_fetch, n_push=args.n_push,
                warm_start_steps=args.warm_start_steps, overlap=args.overlap, transport=args.transport,
                workers=args.workers, runtime=args.runtime, scheduler=args.scheduler,
                checkpoint_dir=args.checkpoint_dir,
                checkpoint_every=args.checkpoint_every, restart_replicas=args.restart_replicas,
                heartbeat_timeout=args.heartbeat_timeout)
    if args.resume is not None and algorithm == "sgd":
        raise ValueError("--resume takes a Downpour or Sandblaster checkpoint; sgd cannot resume from one")
    if algorithm == "sandblaster":
        flat.update(memory=args.memory, iterations=args.iterations, work_unit_size=args.work_unit_size,
                    backup=args.backup, balance=args.balance)
    if algorithm != "sgd":
        flat.update(slow_replicas=tuple(args.slow_replica))
    if algorithm == "sgd":
        flat.update(on_cluster=bool(args.on_cluster or args.scheduler or args.runtime != "dask"))
    if algorithm == "downpour":
        flat.update(replica=getattr(args, "replica", DEFAULTS.downpour.replica))
    return RunConfig.make(**flat, **_knobs(args))
