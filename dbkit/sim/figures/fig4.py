"""Fig. 4, simulated: test accuracy against time for single-replica SGD, Downpour (20 replicas), Downpour with
Adagrad (20 and 200) and Sandblaster L-BFGS (2000), all from one warm start of plain SGD (DistBelief Sec. 5).

With numerics: every method runs dbkit's own replicas and shards on simulated machines of ``profile``, on the
kit's ``signals`` generator with many training examples (the paper's data were vast; with a few thousand
examples, 200 replicas' staleness would span epochs). Each run stops at the target accuracy or its budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ...config import RunConfig
from ...data import Dataset, SignalsConfig, make_signals
from ...runtime.sim.layout import Cluster
from ...telemetry.events import BatchDone
from ...training.evaluate import Evaluation
from ..api import simulated_run
from . import paper
from .ticker import Ticker


@dataclass(frozen=True)
class Method:
    """One curve: ``algorithm`` (downpour or sandblaster) with ``replicas``, ``optimizer`` and ``lr``;
    ``role`` is its name in the paper's figure (``"Downpour Adagrad 200"``)."""

    role: str
    algorithm: str
    replicas: int
    optimizer: str = "sgd"
    lr: float = 0.05
    warm_start_steps: int = 0  # Downpour's own warm start: one replica alone for this many steps, then the rest

    def name(self, replicas: int) -> str:
        """Its label with ``replicas`` replicas (the paper's when they are the paper's number)."""
        base = self.role.rsplit(" ", 1)[0] if self.replicas > 1 else self.role
        return f"{base} {replicas}" if self.replicas > 1 else base


# Learning rates: each method's best of 0.0025, 0.005, 0.01, 0.02, 0.04 and 0.08 on the default setup (time to
# the target; docs/benchmarks.md has the sweep). Downpour SGD with 20 stale replicas diverges at 0.08; 200
# Adagrad replicas' first pushes, all computed at the warm start's parameters, overshoot together above 0.01.
METHODS = (Method("SGD", "downpour", 1, "sgd", 0.08), Method("Downpour 20", "downpour", 20, "sgd", 0.04),
           Method("Downpour Adagrad 20", "downpour", 20, "adagrad", 0.04),
           Method("Sandblaster 2000", "sandblaster", 2000),
           Method("Downpour Adagrad 200", "downpour", 200, "adagrad", 0.01))


#: simulated seconds a run may stay at chance accuracy before its figure gives up on it (``AtChance``)
GIVE_UP_SECONDS = 2.0


@dataclass(frozen=True)
class Setup:
    """What every method shares: the data, model, shards, exchange rates, warm start, target and budget."""

    profile: str = "distbelief-2012"
    train_examples: int = 200_000
    model: str = "mlp"
    shards: int = 16
    sandblaster_shards: int = 8
    n: int = 4
    batch_size: int = 32
    warm_steps: int = 300
    target: float = 0.5
    seconds: float = 15.0
    sandblaster_unit: int = 50  # examples per work unit: two a replica at 2,000 replicas (see ``run_method``)
    seed: int = 0
    replica_scale: float = 1.0  # every method's replicas times this (SGD stays one)

    @classmethod
    def small(cls) -> Setup:
        """A tenth of the replicas and of the data, and a short budget (tests, ``DBKIT_SMALL=1``)."""
        return cls(train_examples=20_000, shards=4, sandblaster_shards=2, target=0.45, seconds=10.0, warm_steps=100,
                   replica_scale=0.1)

    @classmethod
    def at_paper_replicas(cls, small: bool = False) -> Setup:
        """Lessons 02 and 03's arrangement: the paper's replica counts (1, 20, 200), 16 shards, target 0.4;
        with ``small``, on a tenth of the data with a short budget (``Setup.small()``'s)."""
        return replace(cls.small() if small else cls(), shards=16, replica_scale=1.0, target=0.4)

    def replicas(self, method: Method) -> int:
        return 1 if method.replicas == 1 else max(2, round(method.replicas * self.replica_scale))


@dataclass
class AtChance:
    """Gives up on a run whose test accuracy has stayed at most ``chance`` for ``seconds`` simulated seconds
    (a diverged run's, whose loss stays finite): it will not reach the target, and its budget would take
    minutes of this machine's time to run out. Its point on the figure is the same: not reached."""

    chance: float
    seconds: float
    since: float | None = None  # the job's seconds at the first evaluation of the current run of them at chance
    reason: str | None = None  # once it gave up: why

    def __call__(self, t: float, evaluation: Evaluation) -> str | None:
        if evaluation.test_accuracy > self.chance:
            self.since = None
            return None
        self.since = t if self.since is None else self.since
        if t - self.since < self.seconds:
            return None
        self.reason = f"test accuracy at most {self.chance:.2f}, chance, for {t - self.since:.2f} simulated s"
        return self.reason


def dataset(setup: Setup) -> Dataset:
    """``signals`` with ``setup.train_examples`` training examples and the usual 2,000 test examples."""
    n = setup.train_examples
    X, y = make_signals(SignalsConfig(n_train=n, n_test=2_000, seed=setup.seed))
    return Dataset(X[:n], y[:n], X[n:], y[n:], name=f"signals ({n:,} training examples)", n_classes=10)


def warm_start(setup: Setup, data: Dataset) -> tuple[np.ndarray, float, float]:
    """Plain SGD, one replica, ``warm_steps`` steps: the parameters, the simulated seconds and the accuracy."""
    cfg = RunConfig.make(algorithm="downpour", dataset="signals", model=setup.model, replicas=1, shards=setup.shards,
                         optimizer="sgd", lr=0.05, batch_size=setup.batch_size, steps=setup.warm_steps,
                         eval_every=setup.warm_steps, seed=setup.seed)
    run = simulated_run(cfg, Cluster(setup.profile), data=data)
    run.run()
    params = run.parameters()
    return params, run.virtual_seconds, float(run.evaluator(params).test_accuracy)


def method_config(method: Method, setup: Setup, replicas: int) -> RunConfig:
    """The run ``method`` makes with ``replicas`` replicas on ``setup``: from the warm start until the target
    or the budget (``seconds``), evaluated often enough to see when it reaches the target."""
    r = replicas
    if method.algorithm == "sandblaster":
        return RunConfig.make(algorithm="sandblaster", dataset="signals", model=setup.model, replicas=r,
                              shards=setup.sandblaster_shards, steps=None, seconds=setup.seconds, eval_every=1,
                              iterations=10_000, seed=setup.seed,
                              work_unit_size=min(setup.sandblaster_unit, max(1, setup.train_examples // r)))
    return RunConfig.make(algorithm="downpour", dataset="signals", model=setup.model, replicas=r,
                          shards=setup.shards, optimizer=method.optimizer, lr=method.lr,
                          batch_size=setup.batch_size, steps=None, seconds=setup.seconds, n_fetch=setup.n,
                          n_push=setup.n, eval_every=max(25, 10 * r), seed=setup.seed,
                          warm_start_steps=method.warm_start_steps if r > 1 else 0)


def run_method(method: Method, setup: Setup, data: Dataset, initial: np.ndarray, start: float,
               replicas: int | None = None, say: Callable[[str], None] | None = None) -> dict:
    """One method from the warm start until the target or the budget: its curve and time to the target;
    ``say`` is given a progress line every few real seconds while it runs."""
    r = replicas or setup.replicas(method)
    began = time.perf_counter()
    cfg = method_config(method, setup, r)
    at_chance = AtChance(chance=1.0 / data.n_classes + 0.05, seconds=GIVE_UP_SECONDS)
    run = simulated_run(cfg, Cluster(setup.profile), data=data, start=start, initial=initial, stop_at=setup.target,
                        give_up=at_chance)
    if say is not None:
        run.on_evaluation = Ticker(say, method.name(r), start + setup.seconds)  # (the clock counts the warm start)
    run.run()
    t = [float(h["t"]) for h in run.history]
    acc = [float(h["test_accuracy"]) for h in run.history]
    reached = next((ti for ti, a in zip(t, acc) if a >= setup.target), None)
    machines = r + cfg.shards + (1 if method.algorithm == "sandblaster" else 0)
    return {"replicas": r, "machines": machines, "t": t, "test_accuracy": acc, "time_to_target": reached,
            "state": run.state, "gave_up": at_chance.reason,
            "steps": run.progress(), "batches": len(run.events.of(BatchDone)),
            "real_seconds": time.perf_counter() - began,
            "settings": {"algorithm": method.algorithm, "optimizer": method.optimizer if method.algorithm ==
                         "downpour" else "lbfgs", "lr": method.lr if method.algorithm == "downpour" else None,
                         "shards": cfg.shards, "work_unit_size": cfg.sandblaster.work_unit_size
                         if method.algorithm == "sandblaster" else None}}


def figure4(setup: Setup | None = None, methods: tuple[Method, ...] = METHODS,
            progress: Callable[[str], None] | None = None) -> dict:
    """The Fig. 4 report: per method its accuracy curve against simulated seconds and its time to the target.

    Parameters
    ----------
    setup
        Shared settings (default ``Setup()``; ``Setup.small()`` for a quick run).
    methods
        The curves (default: the paper's five).
    progress
        Called with a line as each method starts and ends, and every few seconds while one runs.
    """
    setup = setup or Setup()
    say = progress or (lambda line: None)
    began = time.perf_counter()
    data = dataset(setup)
    say(f"warm start: plain SGD, {setup.warm_steps} steps ...")
    initial, start, warm_accuracy = warm_start(setup, data)
    out, roles = {}, {}
    for m in methods:
        name = m.name(setup.replicas(m))
        say(f"{name}: {setup.replicas(m)} replica{'s' if setup.replicas(m) != 1 else ''} ...")
        out[name], roles[m.role] = run_method(m, setup, data, initial, start, say=progress), name
        out[name]["role_in_paper"] = m.role
        reached = out[name]["time_to_target"]
        say(f"  {name}: " + (f"reached {setup.target:g} at {reached:.3f} simulated s" if reached is not None
                             else f"gave up: {out[name]['gave_up']}" if out[name]["gave_up"]
                             else f"did not reach {setup.target:g} within {setup.seconds:g} simulated s past the "
                                  "warm start")
            + f" ({out[name]['real_seconds']:.0f} s of computing)")
    never = float("inf")
    order = sorted(out, key=lambda k: -(out[k]["time_to_target"] if out[k]["time_to_target"] is not None else never))
    return {"figure": "fig4", "simulated": True, "profile": setup.profile, "target": setup.target,
            "dataset": data.name, "model": setup.model, "warm_start": {"steps": setup.warm_steps, "seconds": start,
                                                                       "test_accuracy": warm_accuracy},
            "setup": setup.__dict__, "methods": out, "order_slowest_to_fastest": order, "paper": paper.FIG4,
            "differences": differences(order, out, roles), "real_seconds": time.perf_counter() - began}


def differences(order: list[str], methods: dict[str, dict], roles: dict[str, str]) -> list[str]:
    """How the simulated order differs from the paper's, and why (as far as the runs show)."""
    expected = [roles[m] for m in paper.FIG4["order_slowest_to_fastest"] if m in roles]
    got = [k for k in order if k in expected]
    if got == expected:
        return []
    never = float("inf")

    def when(role: str) -> float:
        m = methods.get(roles.get(role, ""))
        return never if m is None or m["time_to_target"] is None else m["time_to_target"]

    notes = [f"simulated order, slowest to fastest: {', '.join(got)}; the paper's (its roles): {', '.join(expected)}"]
    many, few = methods.get(roles.get("Downpour Adagrad 200", "")), methods.get(roles.get("Downpour Adagrad 20", ""))
    if many and few and when("Downpour Adagrad 200") > when("Downpour Adagrad 20"):
        notes.append(f"{many['replicas']} Adagrad replicas took {many['steps']:,} steps against {few['replicas']} "
                     f"replicas' {few['steps']:,}, yet learned less per second: each push is about "
                     f"{many['replicas']} versions stale, and the replicas add fewer useful steps than they add "
                     "staleness when the shards' service, not the arithmetic, bounds the steps")
    sb = methods.get(roles.get("Sandblaster 2000", ""))
    faster = [r for r in ("Downpour 20", "Downpour Adagrad 20") if r in roles and when(r) < when("Sandblaster 2000")]
    if sb and faster:
        unit = sb["settings"].get("work_unit_size") or "the default"
        ahead = " and ".join(roles[r] for r in faster)
        notes.append(f"Sandblaster with {sb['replicas']:,} replicas comes after {ahead}: "
                     f"L-BFGS took {sb['steps']} iterations, each one or more batches of the whole training set cut "
                     f"into units of {unit} examples, and in every batch each replica fetches the parameters and "
                     "pushes its gradient, requests whose fixed cost at the shards outweighs a small model's "
                     "arithmetic; the paper's batches were drawn from billions of examples, so a replica's share "
                     "took long next to its requests")
    sgd = methods.get(roles.get("SGD", ""))
    if sgd and order and order[0] != roles["SGD"]:
        notes.append(f"single-replica SGD (lr {sgd['settings']['lr']}) is not last: the target is near enough "
                     f"({sgd['steps']:,} steps) that parallel replicas' extra examples buy little")
    return notes
