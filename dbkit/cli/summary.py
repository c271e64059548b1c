"""Run one configured job end to end and return its report.

Shared by the CLI and by notebooks that want the same JSON report the CLI
writes. Every cluster started here is closed before returning, also on error
and on KeyboardInterrupt (an interrupted run still reports what it did).
"""

from __future__ import annotations

import contextlib
import time

from ..algorithms import SyncSGD
from ..config import RunConfig
from ..data import Dataset, load
from ..nn import Network, build
from ..telemetry import EventLog, build_report


def fit_or_interrupt(fit, log=print) -> bool:
    """Run ``fit()``; on Ctrl-C stop quietly and return True, so the run can still report."""
    try:
        fit()
        return False
    except KeyboardInterrupt:
        log("interrupted: stopping and reporting what was done")
        return True


def prepare(config: RunConfig) -> tuple[Dataset, Network]:
    """Load the dataset and build the model a config names."""
    data = load(config.dataset, seed=config.seed)
    net = build(config.model, data.n_features, data.n_classes, hidden=config.hidden, l2=config.l2,
                image_shape=data.image_shape)
    return data, net


def run_sgd(config: RunConfig, on_cluster: bool = False, progress: bool = True, log=print) -> dict:
    """Synchronous SGD, in process or with its parameters on shard actors on a cluster.

    With ``on_cluster``, the parameters live on ``config.shards`` parameter
    shard actors (a LocalCluster, or ``config.scheduler``): each step fetches
    them and pushes the gradient back.
    """
    if config.replicas != 1:
        raise ValueError(f"sgd is the single-replica baseline: replicas must be 1, got {config.replicas}")
    data, net = prepare(config)
    log(f"dataset {data.name}: {data.n_train} train / {len(data.y_test)} test, "
        f"{data.n_features} features, {data.n_classes} classes")
    log(f"model {net.name}: {net.size:,} parameters")
    events = EventLog()
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        server, cluster_info = None, {"kind": "none"}
        if on_cluster:
            from ..cluster import Cluster, start_shards

            cluster = stack.enter_context(Cluster(scheduler=config.scheduler, n_workers=config.workers))
            server = start_shards(cluster, net.init_params(config.seed), config.shards, config.optimizer, config.lr)
            cluster_info = {"kind": cluster.kind, "workers": cluster.workers()}
            log(f"cluster ({cluster.kind}): {len(cluster_info['workers'])} workers, "
                f"{config.shards} parameter shard(s) on {sorted(set(server.workers))}")
        algo = SyncSGD(net, data, config, server=server, record=events.record)
        interrupted = fit_or_interrupt(lambda: algo.fit(progress=progress), log)
        summary = algo.summary()
        final = algo.evaluator.final(summary["params"])
    wall = time.perf_counter() - started
    extra = {
        "dataset": data.summary(),
        "model": {"name": net.name, "parameters": net.size, "layers": [l.describe() for l in net.layers]},
        "cluster": cluster_info,
        "events": events.summary(),
        "interrupted": interrupted,
    }
    return build_report(summary, config.to_dict(), final, wall, extra)


def run_downpour(config: RunConfig, progress: bool = True, log=print) -> dict:
    """Downpour SGD (paper Sec. 4.1) on a LocalCluster or ``config.scheduler``; returns the report."""
    from ..cluster.downpour import DownpourSGD

    data, net = prepare(config)
    log(f"dataset {data.name}: {data.n_train} train / {len(data.y_test)} test; model {net.name}: "
        f"{net.size:,} parameters")
    log(f"downpour: {config.replicas} replicas"
        + (f" of {config.partitions} partitions each" if config.partitions > 1 else "")
        + f", {config.shards} shards, n_fetch={config.n_fetch}, "
        f"n_push={config.n_push}, {config.optimizer} lr={config.lr}"
        + (f", warm start {config.warm_start_steps} steps" if config.warm_start_steps else ""))
    with DownpourSGD(net, data, config=config) as job:
        job.start()
        log(f"cluster ({job.cluster.kind}): workers {job.cluster.workers()}")
        interrupted = fit_or_interrupt(
            lambda: job.fit(steps=config.steps, seconds=config.seconds, progress=progress), log)
    report = job.report()
    report["interrupted"] = interrupted
    return report


def run_sandblaster(config: RunConfig, progress: bool = True, log=print) -> dict:
    """Sandblaster L-BFGS (paper Sec. 4.2) on a LocalCluster or ``config.scheduler``; returns the report."""
    from ..cluster.sandblaster import SandblasterLBFGS

    data, net = prepare(config)
    log(f"dataset {data.name}: {data.n_train} train; model {net.name}: {net.size:,} parameters, l2={config.l2}")
    with SandblasterLBFGS(net, data, config=config) as job:
        job.start()
        log(f"sandblaster: {config.replicas} replicas, {config.shards} shards, memory {config.memory}, "
            f"{len(job.batch.units)} work units of {job.unit_size} examples per batch, "
            f"backups {'on' if config.backup else 'off'}" + (f", slow {dict(config.slow_replicas)}"
                                                            if config.slow_replicas else ""))
        interrupted = fit_or_interrupt(lambda: job.fit(progress=progress), log)
    report = job.report()
    report["interrupted"] = interrupted
    sb = report["sandblaster"]
    log(f"L-BFGS: {sb['iterations']} iterations, {sb['batch_evaluations']} batch gradients ({sb['stop_reason']}); "
        f"units per replica {sb['units_per_replica']}, backups {sb['backups_issued']} issued / "
        f"{sb['backups_won']} won")
    return report


def print_summary(report: dict, log=print) -> None:
    f = report["final"]
    log(f"{report['algorithm']}: {report['steps']} steps, {report['examples_per_second']:.0f} examples/s, "
        f"{report['wall_seconds']:.1f}s wall")
    log(f"final: test accuracy {f['test_accuracy']:.4f}, test loss {f['test_loss']:.4f}, "
        f"full-batch training loss {f['full_batch_loss']:.4f}")
    b = report["bytes"]
    if b["fetched"] or b["pushed"]:
        log(f"parameter server: {b['fetched'] / 1e6:.1f} MB fetched, {b['pushed'] / 1e6:.1f} MB pushed")
    if b["between_partitions"]:
        log(f"between partitions: {b['between_partitions'] / 1e6:.2f} MB sent "
            f"(the connectivity requires {b['between_partitions_min'] / 1e6:.2f} MB)")
    if len(report["replicas"]) > 1 or report["algorithm"] != "sgd":
        for r in report["replicas"]:
            state = f" ({r.get('state')}: {r.get('error')})" if r.get("failures") else ""
            log(f"  replica {r.get('replica', 0)}: {r['steps']} steps, {r['pushes']} pushes, "
                f"{r['fetches']} fetches{state}")
    for s in report["shards"]:
        st = s["staleness"]
        log(f"  shard {s.get('index', '?')} on {s['worker']}: {s['updates']} updates, {s['rejected']} refused, "
            f"staleness mean {st['mean']:.2f} p95 {st['p95']} max {st['max']}")
