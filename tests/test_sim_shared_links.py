"""Messages sharing NICs in the simulator (``dbkit.runtime.sim.shared_links``): arrival times worked out by
hand for flows that overlap, the rates checked against max-min fairness's own definition (every flow has a
full NIC on which no flow is faster), and a profile's ``shared_links`` taking effect in a simulated job."""

import numpy as np
import pytest

from dbkit.runtime.sim.engine import Simulation
from dbkit.runtime.sim.machines import Cores, Machine, Network
from dbkit.runtime.sim.profile import ProfileError
from dbkit.runtime.sim.profile import load as load_profile
from dbkit.runtime.sim.shared_links import Flow, fair_rates

MB = 1e6


def _machines(n: int, bandwidth: float = 10 * MB) -> list[Machine]:
    return [Machine(f"m{i}", Cores(1), bandwidth) for i in range(n)]


def _arrivals(network: Network, sends: list[tuple[float, int, int, int]], n: int) -> dict[int, float]:
    """Send ``(start, src, dst, nbytes)`` on ``n`` machines of 10 MB/s; when each message arrived."""
    sim, m, arrived = Simulation(), _machines(n), {}
    for k, (start, src, dst, nbytes) in enumerate(sends):
        def go(k=k, src=src, dst=dst, nbytes=nbytes) -> None:
            network.send(sim, sim.now, m[src], m[dst], nbytes, lambda: arrived.__setitem__(k, sim.now))
        sim.at(start, go)
    sim.run()
    return arrived


def test_two_messages_sent_at_once_share_the_senders_nic_and_arrive_together():
    sends = [(0.0, 0, 1, 10 * MB), (0.0, 0, 2, 10 * MB)]  # 1 s each at the full rate
    shared = _arrivals(Network(1e-3, shared=True), sends, 3)
    fifo = _arrivals(Network(1e-3), sends, 3)
    assert shared == pytest.approx({0: 2.001, 1: 2.001})
    assert fifo == pytest.approx({0: 1.001, 1: 2.001})  # first come, first served pipelines them


def test_a_message_joining_halfway_slows_the_first_and_both_end_when_the_bytes_say():
    # A: 20 MB from 0 s; B: 10 MB from 1 s, when A has 10 MB left; from then each goes at 5 MB/s
    shared = _arrivals(Network(0.0, shared=True), [(0.0, 0, 1, 20 * MB), (1.0, 0, 2, 10 * MB)], 3)
    assert shared == pytest.approx({0: 3.0, 1: 3.0})
    # B is into another machine's NIC from a third: it does not touch A's, and A is not slowed
    apart = _arrivals(Network(0.0, shared=True), [(0.0, 0, 1, 20 * MB), (1.0, 2, 3, 10 * MB)], 4)
    assert apart == pytest.approx({0: 2.0, 1: 2.0})


def test_the_receivers_nic_is_shared_too_and_a_flow_limited_elsewhere_leaves_its_share_to_others():
    # two senders into machine 0 (incast): each at 5 MB/s; a third flow from 1 to 2 gets what 1 has left
    shared = _arrivals(Network(0.0, shared=True), [(0.0, 1, 0, 5 * MB), (0.0, 3, 0, 5 * MB), (0.0, 1, 2, 5 * MB)], 4)
    assert shared == pytest.approx({0: 1.0, 1: 1.0, 2: 1.0})


def test_the_nics_busy_time_and_bytes_are_counted_as_the_first_come_model_counts_them():
    sim, m = Simulation(), _machines(3)
    network = Network(0.0, shared=True)
    network.send(sim, 0.0, m[0], m[1], int(10 * MB), lambda: None)
    network.send(sim, 0.0, m[0], m[2], int(10 * MB), lambda: None)
    sim.run()
    assert m[0].bytes_sent == 20 * MB and m[0].messages_sent == 2 and m[1].bytes_received == 10 * MB
    assert m[0].tx_busy == pytest.approx(2.0) and m[1].rx_busy == pytest.approx(1.0)
    assert m[0].link_busy(sim.now) == pytest.approx(1.0)


@pytest.mark.parametrize("seed", range(20))
def test_fair_rates_are_max_min_fair_by_the_definition(seed):
    """An allocation is max-min fair iff it is feasible and every flow crosses a full NIC on which no flow
    is faster (its bottleneck; Bertsekas and Gallager, Data Networks, 6.5.2): checked on random flows."""
    rng = np.random.default_rng(seed)
    m = [Machine(f"m{i}", Cores(1), float(rng.uniform(1, 10))) for i in range(rng.integers(2, 7))]
    flows = []
    for _ in range(rng.integers(1, 15)):
        src, dst = rng.choice(len(m), 2, replace=False)
        flows.append(Flow(m[src], m[dst], 1.0, lambda: None, 0.0))
    rates = fair_rates(flows)
    load = {}
    for f, r in zip(flows, rates):
        load[(id(f.src), "tx")] = load.get((id(f.src), "tx"), 0.0) + r
        load[(id(f.dst), "rx")] = load.get((id(f.dst), "rx"), 0.0) + r
    bandwidth = {(id(x), d): x.bandwidth for x in m for d in ("tx", "rx")}
    assert all(load[k] <= bandwidth[k] * (1 + 1e-9) for k in load)
    for f, r in zip(flows, rates):
        assert r > 0
        ends = [(id(f.src), "tx"), (id(f.dst), "rx")]
        bottleneck = [k for k in ends if load[k] >= bandwidth[k] * (1 - 1e-9)
                      and all(r >= r2 * (1 - 1e-9) for f2, r2 in zip(flows, rates)
                              if k in ((id(f2.src), "tx"), (id(f2.dst), "rx")))]
        assert bottleneck, (seed, r)


def test_a_profiles_shared_links_is_a_flag_and_reaches_the_simulated_network():
    from dbkit.runtime.sim.layout import Cluster, lay_out

    base = load_profile("distbelief-2012")
    assert base.machine.shared_links == 0
    shared = base.but(machine={"shared_links": 1})
    assert lay_out(Cluster(shared), shards=1).network.shared
    assert not lay_out(Cluster(base), shards=1).network.shared
    with pytest.raises(ProfileError, match="shared_links must be in \\[0, 1\\]"):
        base.but(machine={"shared_links": 2})
    with pytest.raises(ProfileError, match="shared_links must be a whole number"):
        base.but(machine={"shared_links": 0.5})


def _examples_per_second(profile, shards: int) -> float:
    import dbkit
    from dbkit.sim import Cluster as SimCluster

    with dbkit.DownpourSGD("speech", "speech", cluster=SimCluster(profile), replicas=1, shards=shards, n_fetch=1,
                           n_push=1, optimizer="adagrad", lr=0.01, batch_size=32, seed=0) as job:
        job.fit(seconds=4, progress=False)
        return float(job.report()["examples_per_second"])


def test_one_replica_bound_by_its_own_link_gains_from_more_shards_only_when_the_nic_pipelines():
    """One replica at n_fetch = n_push = 1 on 100 Mbit/s links moves the whole model each way every step
    through its own link, however many shards hold it. Shared like TCP's, the link's time per step is the
    same at 2 and at 4 shards; first come, first served, the first shard's answer comes back while the
    other slices still go out, and 4 shards look faster than 2 (the simulator's error on the emulated
    cluster, docs/benchmarks.md)."""
    from dbkit.emulate.cluster import ClusterSpec
    from dbkit.emulate.profile import emulated_profile

    base = emulated_profile(ClusterSpec(hosts=8, link="100mbit", cpu=0.25), measured_seconds=0.04)
    base = base.but(machine={"machines": 0})
    shared = {s: _examples_per_second(base, s) for s in (2, 4)}
    fifo = {s: _examples_per_second(base.but(machine={"shared_links": 0}), s) for s in (2, 4)}
    assert shared[4] == pytest.approx(shared[2], rel=0.05)
    assert fifo[4] > 1.15 * fifo[2]
    assert shared[4] < fifo[4]
