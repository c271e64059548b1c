"""Downpour in virtual time against independent references: plain SGD, a schedule worked out by hand,
the M/D/1 queue's formula, and itself (same seed, same report)."""

import dataclasses

import pytest

from dbkit import data, nn
from dbkit.config import RunConfig
from dbkit.runtime.sim.compute import TimedNetwork
from dbkit.runtime.sim.cost import CostModel
from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.layout import lay_out
from dbkit.runtime.sim.shape import ModelShape
from dbkit.sim import Cluster, load_profile, simulated_run
from dbkit.sync_sgd import SGDTrainer
from dbkit.telemetry import validate_report


@pytest.fixture(scope="module")
def digits():
    return data.load("digits")


FREE = dict(message={"cpu_seconds": 0.0, "cpu_seconds_per_byte": 0.0, "local_call_seconds": 0.0,
                     "control_seconds": 0.0, "task_seconds": 0.0, "partition_message_seconds": 0.0},
            shard={"request_seconds": 0.0, "push_seconds_per_float_sgd": 0.0, "push_seconds_per_float_adagrad": 0.0,
                   "fetch_seconds_per_float": 0.0, "vector_seconds_per_float": 0.0},
            machine={"latency": 0.0, "bandwidth": 1e300, "cpu_factor": 1.0, "switch_seconds": 0.0})


def free_communication(**compute):
    """The ``here`` profile with every cost of communication and of the shards at zero (and no measured
    table of message costs); arithmetic as calibrated, or as ``compute`` says."""
    base = dataclasses.replace(load_profile("here"), measured={})
    return base.but(**FREE, compute=compute)


def downpour(net, data, cluster, **settings):
    cfg = RunConfig.make(algorithm="downpour", **{"optimizer": "sgd", "lr": 0.05, **settings})
    return simulated_run(cfg, cluster, network=net, data=data)


def test_one_replica_with_free_communication_is_plain_sgd_bit_for_bit(digits):
    net = nn.build("mlp", 64, 10, l2=1e-4)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    run = downpour(net, digits, Cluster(free_communication()), replicas=1, shards=1, steps=60)
    report = run.run()
    assert report["steps"] == 60 and validate_report(report) == []
    assert run.parameters().tobytes() == base.params.tobytes()


def test_the_overlapped_client_with_real_costs_is_not_plain_sgd(digits):
    # The check above means something: with communication that takes time, the overlapped client
    # computes on parameters one exchange old and the result differs.
    net = nn.build("mlp", 64, 10, l2=1e-4)
    base = SGDTrainer(net, digits, lr=0.05)
    for _ in range(60):
        base.step()
    run = downpour(net, digits, Cluster("here"), replicas=1, shards=1, steps=60)
    run.run()
    assert run.parameters().tobytes() != base.params.tobytes()


@pytest.mark.parametrize("replicas", [2, 3, 5])
def test_staleness_follows_from_the_schedule(digits, replicas):
    # Free communication, one shard, equal replicas on machines of their own, each step's compute the same:
    # every replica pushes once per round, in replica order. In the first round replica i finds the i pushes
    # before it; from then on every push finds the other replicas' pushes since its own: staleness R - 1.
    net = nn.build("linear", 64, 10)
    rounds = 10
    run = downpour(net, digits, Cluster(free_communication(), machines=replicas), replicas=replicas, shards=1,
                   steps=replicas * rounds, eval_every=10**6)
    report = run.run()
    expected = {k: 1 for k in range(replicas - 1)}
    expected[replicas - 1] = replicas * rounds - (replicas - 1)
    assert dict(run.services[0].shard.staleness) == expected
    assert report["shards"][0]["staleness"]["max"] == replicas - 1
    assert [r["steps"] for r in report["replicas"]] == [rounds] * replicas


def test_a_replica_twice_as_slow_pushes_half_as_often_and_sees_more_staleness(digits):
    # Two replicas, one twice as slow (it sleeps a step's time after each step, as a real straggler does),
    # free communication: in the time the slow one takes one step the fast one takes two, so the slow one's
    # pushes find 2 pushes since its fetch, the fast one's 0 or 1. Given a budget of 300 steps, the cap is
    # shared by the replicas' speeds once they are known (``StepBudget``), as a common budget would be.
    net = nn.build("linear", 64, 10)
    run = downpour(net, digits, Cluster(free_communication(), machines=2), replicas=2, shards=1, steps=300,
                   slow_replicas={1: 2.0}, eval_every=10**6)
    report = run.run()
    fast, slow = report["replicas"]
    # (within 3: the last few steps, held back until both wait, are shared by speed in whole steps: 201 and 99)
    assert fast["steps"] + slow["steps"] == 300 and abs(fast["steps"] - 2 * slow["steps"]) <= 3
    assert slow["staleness"]["p50"] == 2 and fast["staleness"]["max"] <= 1


def test_same_seed_same_report(digits):
    def once():
        net = nn.build("mlp", 64, 10, l2=1e-4)
        r = downpour(net, digits, Cluster("here"), replicas=3, shards=2, optimizer="adagrad", steps=300,
                     eval_every=100).run()
        for key in ("created", "simulation"):
            r.pop(key)
        return r

    a, b = once(), once()
    assert a == b
    assert a["history"][-1]["test_accuracy"] > 0.8


@pytest.mark.parametrize("n", [1, 4])
def test_gradients_computed_as_a_stack_give_the_run_computed_one_by_one_bit_for_bit(digits, n):
    """Deferring each gradient to the end of its hold and computing those due together as one stack
    (``GradientBatch``) changes nothing but speed: the reference is the same run, gradient by gradient."""
    def once(stack):
        net = nn.build("mlp", 64, 10, l2=1e-4)
        cfg = RunConfig.make(algorithm="downpour", optimizer="adagrad", lr=0.05, replicas=12, shards=2, steps=600,
                             eval_every=200, n_fetch=n, n_push=n)
        run = simulated_run(cfg, Cluster("distbelief-2012"), network=net, data=digits, stack_gradients=stack)
        report = run.run()
        return report, run.parameters(), report.pop("simulation"), report.pop("created")

    (stacked, p1, sim1, _), (alone, p2, sim2, _) = once(True), once(False)
    assert sim1["stacked_gradients"] > 100 and sim2["stacked_gradients"] == 0  # stacks were computed
    assert stacked == alone and (p1 == p2).all() and sim1["virtual_seconds"] == sim2["virtual_seconds"]


def _queue_run(digits, replicas, service, compute, seconds, jitter="exponential"):
    """``replicas`` replicas pushing (never fetching after the first) to one shard whose every push is
    served in ``service`` seconds, for ``seconds`` of virtual time (every replica steps to the end: a steady
    stream, where a budget of steps would thin out as replicas finish their shares); each replica computes
    for ``compute`` seconds on average."""
    net = nn.build("linear", 64, 10)
    profile = free_communication(step_seconds=compute, layer_seconds=0.0, dense_flops_per_second=1e300,
                                 elementwise_per_second=1e300, update_seconds_per_parameter=0.0)
    profile = profile.but(shard={"request_seconds": service}, machine={"machines": 0})  # each on its own machine
    cfg = RunConfig.make(algorithm="downpour", optimizer="sgd", lr=0.01, replicas=replicas, shards=1,
                         n_fetch=100_000, n_push=1, seconds=seconds, steps=10**9, eval_every=10**9)
    run = simulated_run(cfg, Cluster(profile), network=net, data=digits, jitter=jitter)
    run.run()
    return run


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_a_shard_fed_poisson_pushes_queues_as_m_d_1(digits, rho):
    # Many replicas with exponential compute times make the pushes a Poisson stream of rate R / compute;
    # a push is served in a fixed time D. M/D/1: mean wait in the queue = rho D / (2 (1 - rho)).
    R, D = 100, 1e-3
    run = _queue_run(digits, R, D, compute=R * D / rho, seconds=300 * R * D / rho)  # about 300 steps each
    measured = run.services[0].figures.mean_wait("push")  # not the replicas' first fetches, all at t = 0
    assert measured == pytest.approx(rho * D / (2 * (1 - rho)), rel=0.1)


def test_pushes_per_second_saturate_at_the_shards_service_rate(digits):
    D, compute = 1e-3, 4e-3
    rates = []
    for R in (1, 2, 8, 32):
        run = _queue_run(digits, R, D, compute, seconds=2.0, jitter="none")
        rates.append(run.services[0].figures.served / run.report()["simulation"]["virtual_seconds"])
    assert rates[0] == pytest.approx(1 / compute, rel=0.02)  # alone: its push is served while it computes on
    assert rates[-1] == pytest.approx(1 / D, rel=0.02)  # many: the shard is the bottleneck
    assert rates == sorted(rates)


@pytest.mark.parametrize("threads", [4, 16])
def test_a_step_on_many_threads_follows_amdahls_law(digits, threads):
    # The step's fixed work (step_seconds) runs on one core, its arithmetic is split across the threads:
    # T(threads) = S + (T(1) - S) / threads, as partitioned_step counts a partition's step for Fig. 3.
    S, steps = 2e-3, 50

    def seconds_per_step(t):
        profile = free_communication(step_seconds=S, layer_seconds=0.0, dense_flops_per_second=1e6,
                                     update_seconds_per_parameter=0.0)
        profile = profile.but(machine={"machines": 0, "cores": 16, "threads_per_replica": t})
        net = nn.build("linear", 64, 10)
        sim = Simulation()
        machine = lay_out(Cluster(profile), 1).new_machine("replica")
        timed = TimedNetwork(net, sim, machine, CostModel(profile, ModelShape.of(net)), update_floats=net.size,
                             threads=t)
        params, X, y = net.init_params(0), digits.X_train[:32], digits.y_train[:32]
        sim.spawn(lambda: [timed.loss_and_grad(params, X, y) for _ in range(steps)])
        sim.run()
        return sim.now / steps

    one = seconds_per_step(1)
    assert one > 2 * S  # the arithmetic is a real share of the step
    assert seconds_per_step(threads) == pytest.approx(S + (one - S) / threads, rel=1e-6)


def test_short_work_beside_a_computation_runs_at_its_next_release_and_the_next_computation_pays():
    from dbkit.runtime.sim.machines import Cores, Machine

    plain = Machine("w", Cores(1), 1e9)
    assert plain.compute(0.0, 1.0) == 1.0
    assert plain.interleave(0.2, 0.1) == pytest.approx(1.1)  # no release: it waits for the computation
    m = Machine("w", Cores(1), 1e9, release_seconds=0.01, handoff_seconds=0.05)
    assert m.compute(0.0, 1.0) == 1.0
    assert m.interleave(0.2, 0.1) == pytest.approx(0.31)  # at the computation's next release, not at 1.0
    assert m.interleave(0.2, 0.1) == pytest.approx(0.41)  # one piece at a time
    assert m.compute(1.0, 1.0) == pytest.approx(1.0 + 1.0 + 2 * (0.1 + 0.05))  # the next computation pays
    assert m.interleave(5.0, 0.1) == pytest.approx(5.1)  # nothing computing: an idle core


def test_a_simulated_shard_end_writes_fetched_parameters_into_the_clients_array():
    """A ``ShardEnd`` is an end its client owns, as a ``WireShard`` is: a push_fetch through it writes the
    shard's parameters straight into the client's array, equal to what a push_fetch on the shard itself
    gives; ``close`` ends nothing, and the end still carries commands after it."""
    import numpy as np

    from dbkit.ps import ParameterShard, ShardedParameters, balanced_layout
    from dbkit.ps.client import owned_end
    from dbkit.runtime.sim.cost import CostModel
    from dbkit.runtime.sim.ends import ShardEnd
    from dbkit.runtime.sim.engine import Simulation
    from dbkit.runtime.sim.machines import Cores, Machine, Network
    from dbkit.runtime.sim.shape import ModelShape
    from dbkit.runtime.sim.shard_service import ShardService

    net = nn.build("mlp", 8, 3)
    initial, grad = net.init_params(0), np.linspace(-1, 1, net.size, dtype=np.float32)
    shard, reference = (ParameterShard(0, 0, net.size, initial, "adagrad", 0.1) for _ in range(2))
    sim, cost = Simulation(), CostModel(load_profile("distbelief-2012"), ModelShape.of(net))
    server, client = Machine("server", Cores(1), 1e9), Machine("client", Cores(1), 1e9)
    end = ShardEnd(ShardService(sim, shard, server, Network(1e-4), cost), client)
    params = ShardedParameters([end], balanced_layout(net.size, 1))
    assert owned_end(end)
    got: dict = {}

    def replica() -> None:
        got["answers"], got["params"] = params.start_push_fetch(grad, examples=4).result()
        got["buffer"] = np.zeros(net.size, dtype=np.float32)
        got["fetched"] = end.fetch(into=got["buffer"]).result()
        got["lr"] = end.set_lr(0.2).result()  # a command, through ``__getattr__``

    sim.spawn(replica)
    sim.run()
    answer, _, expected = reference.push_fetch(grad, 0, examples=4)
    assert got["answers"][0].accepted and got["answers"][0].version == answer.version == 1
    assert np.array_equal(got["params"], expected) and np.array_equal(shard.params, reference.params)
    assert not np.shares_memory(got["params"], shard.params) and sim.now > 0
    version, values = got["fetched"]
    assert version == 1 and values is got["buffer"] and np.array_equal(values, expected)  # written in place
    assert got["lr"] == 0.2 and shard.rule.lr == 0.2
    params.close()  # nothing to end; the shard stays
    assert shard.version == 1
