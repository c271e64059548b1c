"""A partition's arithmetic rate against how much its part of a layer touches (``ComputeSpec.rate``, Fig. 3)."""

import numpy as np
import pytest

from dbkit import nn
from dbkit.runtime.sim.partitioned_step import partitioned_step
from dbkit.runtime.sim.profile import ProfileError, from_dict, load
from dbkit.sim import ModelShape


def test_a_layers_working_set_counts_the_arrays_its_arithmetic_reads_and_writes():
    batch = 5
    rng = np.random.default_rng(0)
    lc = nn.LocallyConnected2D(9, 7, 3, kernel=3, filters=4)
    params = lc.init(rng)
    x = rng.standard_normal((batch, lc.in_size)).astype(np.float32)
    out, patches = lc.forward(params, x)
    floats = patches.size + params["W"].size + params["b"].size + out.size  # what the matmuls touch
    (layer,) = ModelShape.of(nn.Network([lc])).layers[:1]
    assert layer.working_set_bytes(1.0, batch) == pytest.approx(4 * floats)
    assert layer.working_set_bytes(0.25, batch) == pytest.approx(floats)  # a quarter of its units: of it all

    dense = nn.Dense(6, 3)
    d = ModelShape.of(nn.Network([dense])).layers[0]
    w = dense.init(rng)
    # weights, bias, outputs; and all of the inputs, which every unit's row reads whatever the share
    assert d.working_set_bytes(1.0, batch) == pytest.approx(4 * (w["W"].size + w["b"].size + batch * 3 + batch * 6))
    assert d.working_set_bytes(1 / 3, batch) == pytest.approx(4 * ((18 + 3) / 3 + batch + batch * 6))
    assert ModelShape.of(nn.Network([nn.Dense(6, 3), nn.ReLU(3)])).layers[1].working_set_bytes(1.0, batch) == 0


def test_a_rate_follows_a_power_of_the_working_set_between_the_floor_and_any_larger_set():
    here = load("here")
    c = here.compute
    assert c.rate("dense", 1e3) == c.dense_flops_per_second  # exponent 0 (every shipped profile): one rate
    assert c.rate("local", 1e9) == c.local_flops_per_second
    p = here.but(compute={"dense_working_set_bytes": 8e6, "dense_working_set_floor_bytes": 1e6,
                          "dense_working_set_exponent": 0.5})
    c = p.compute
    base = c.dense_flops_per_second
    assert c.rate("dense", 8e6) == pytest.approx(base)
    assert c.rate("dense", 2e6) == pytest.approx(2 * base)  # a quarter of the bytes: (4) ** 0.5
    assert c.rate("dense", 32e6) == pytest.approx(base / 2)  # beyond the measured set: slower, on the same line
    assert c.rate("dense", 1e3) == pytest.approx(base * 8 ** 0.5)  # below the floor: the floor's rate
    assert c.rate("local", 1e3) == c.local_flops_per_second  # the other kind is untouched
    assert c.rate("elementwise", 1e3) == c.elementwise_per_second
    d = p.to_dict()
    d["compute"]["local_working_set_exponent"] = 1.5
    with pytest.raises(ProfileError, match="local_working_set_exponent must be in \\[0, 1\\]"):
        from_dict(d, "test")


def test_with_an_exponent_a_partitions_arithmetic_shrinks_faster_than_its_share():
    """Plain arithmetic: an eighth of each layer's units costs at least an eighth of the whole. With a rate that
    grows as the working set shrinks, the eight partitions together compute less than the whole network."""
    shape = ModelShape.of(nn.Network([nn.Dense(4096, 2048), nn.ReLU(2048), nn.Dense(2048, 10)]))
    plain = load("here").but(machine={"latency": 0.0})
    faster = plain.but(compute={"dense_working_set_bytes": 8e6, "dense_working_set_floor_bytes": 1e6,
                                "dense_working_set_exponent": 0.3})

    def arithmetic(profile, k: int) -> float:  # noqa: ANN001
        return partitioned_step(profile, shape, k, 32, bands=True, update=False).compute

    assert 8 * arithmetic(plain, 8) >= arithmetic(plain, 1)
    assert 8 * arithmetic(faster, 8) < 0.9 * arithmetic(faster, 1)
    # the first layer touches 35 MB whole and 4.8 MB an eighth: (35 / 4.8) ** 0.3 = 1.8x faster per flop
    first = shape.layers[0]
    ratio = (first.working_set_bytes(1.0, 32) / first.working_set_bytes(1 / 8, 32)) ** 0.3
    assert 1.7 < ratio < 1.9


def _two_layers(profile, machines: int = 2, batch: int = 5, update: bool = False):  # noqa: ANN001, ANN202
    shape = ModelShape.of(nn.Network([nn.Dense(10, 8), nn.ReLU(8), nn.Dense(8, 4)]))
    return partitioned_step(profile, shape, machines, batch, bands=True, update=update)


def test_a_boundary_byte_costs_its_per_byte_charge_at_each_end_of_each_exchange():
    """Dense(10, 8), ReLU, Dense(8, 4) in two bands, batch 5: the second layer's half of its input is 4 floats
    an example from the other machine (80 bytes), the logits' other half 2 floats an example (40 bytes); each
    goes forward and its gradient back. Charging x a byte adds 2 (80 + 40) x, times the machine's speed."""
    plain = load("here")
    x = 1e-6
    costly = plain.but(message={"partition_seconds_per_byte": x})
    assert _two_layers(costly).exchange - _two_layers(plain).exchange == pytest.approx(
        2 * (80 + 40) * x * plain.machine.cpu_factor)
    assert _two_layers(costly, 1).exchange == _two_layers(plain, 1).exchange == 0.0  # one machine sends nothing
    assert plain.message.partition_seconds_per_byte == load("distbelief-2012").message.partition_seconds_per_byte == 0
    with pytest.raises(ProfileError, match="partition_seconds_per_byte"):
        plain.but(message={"partition_seconds_per_byte": -1e-9})


def test_each_exchange_costs_its_own_charge_once_whatever_its_senders():
    """Dense(10, 8), ReLU, Dense(8, 4): the second layer's exchange forward and back, and the logits' there and
    back: four exchanges a step, in two machines or in four."""
    plain = load("here")
    x = 1e-4
    costly = plain.but(message={"partition_exchange_seconds": x})
    for k in (2, 4):
        assert _two_layers(costly, k).exchange - _two_layers(plain, k).exchange == pytest.approx(
            4 * x * plain.machine.cpu_factor)
    assert _two_layers(costly, 1).exchange == 0.0


def test_a_links_token_bucket_lets_messages_through_at_once_but_never_beats_the_rate_in_the_long_run():
    """The two-layer network's exchanges carry 80, 40, 40 and 80 bytes a step (see above). At 1,000 bytes a
    second its step sends more than its link carries in its computing time: with or without a bucket, steps
    one after another take at least 240 ms; with no bucket each byte also waits its 1 ms. At 100,000 bytes a
    second the link is not the bottleneck: a bucket of a step's bytes lets every message through at once, a
    smaller one part of them. Checked too against a bucket written by hand."""
    base = load("here").but(machine={"latency": 0.0}, message={"partition_message_seconds": 0.0},
                            compute={"layer_seconds": 0.005, "step_seconds": 0.0})
    slow = base.but(machine={"bandwidth": 1000.0})
    no_bucket = _two_layers(slow)
    assert no_bucket.exchange == pytest.approx(0.240)
    for depth in (30.0, 240.0, 1e6):
        bucket = _two_layers(slow.but(machine={"burst_bytes": depth}))
        assert bucket.compute == pytest.approx(no_bucket.compute)
        assert bucket.seconds >= 0.240 * (1 - 1e-9)  # the rate, in the long run
    assert _two_layers(slow.but(machine={"burst_bytes": 1e6})).seconds == pytest.approx(0.240, rel=1e-6)

    fast = base.but(machine={"bandwidth": 1e5})
    assert _two_layers(fast).exchange == pytest.approx(0.0024)
    assert _two_layers(fast.but(machine={"burst_bytes": 240.0})).exchange == pytest.approx(0.0, abs=1e-12)
    assert 0 < _two_layers(fast.but(machine={"burst_bytes": 50.0})).exchange < 0.0024

    def by_hand(profile, depth: float) -> float:  # noqa: ANN001
        rate, cpu = profile.machine.bandwidth, profile.machine.cpu_factor
        tokens, at, now, before, waited = min(depth, 240.0), 0.0, 0.0, -1.0, 0.0
        while abs(tokens - before) > 1e-9 * depth:
            before, waited = tokens, 0.0
            for seconds, nbytes in _hand_phases(profile, cpu):
                tokens = min(depth, tokens + (now - at) * rate)
                take = min(tokens, nbytes)
                tokens -= take
                wait = (nbytes - take) / rate
                at = now + wait
                waited += wait
                now += seconds + wait
            tokens, at = min(depth, tokens + (now - at) * rate), now
        return waited

    for profile in (slow, fast):
        for depth in (30.0, 100.0, 150.0):
            got = _two_layers(profile.but(machine={"burst_bytes": depth})).exchange
            assert got == pytest.approx(by_hand(profile, depth), rel=1e-6), depth


def _hand_phases(profile, cpu: float) -> list:  # noqa: ANN001
    """The two-layer network's step in two bands, batch 5, as (seconds, bytes): each layer's fixed work each
    way and its arithmetic, from the profile's dense rate."""
    rate = profile.compute.dense_flops_per_second
    fixed = profile.compute.layer_seconds
    l1, l2 = 10 * 8 * 2 * 5 / 2 / rate, 8 * 4 * 2 * 5 / 2 / rate  # half of each layer's units, batch 5
    return [((fixed + l1) * cpu, 0), (0, 80), ((fixed + l2) * cpu, 0), (0, 40), (0, 40),
            ((fixed + 2 * l2) * cpu, 0), (0, 80), ((fixed + l1) * cpu, 0), (0.0, 0)]


def test_an_array_of_32_mib_or_more_made_each_step_is_charged_and_a_smaller_one_is_not():
    """4096-2048-10: the first layer's weight gradient is 32 MiB and 8 KiB (its bias), the partition's gradient
    vector 33.6 MB; in two partitions each is half, below glibc's threshold."""
    from dbkit.runtime.sim.profile import FRESH_BYTES

    shape = ModelShape.of(nn.Network([nn.Dense(4096, 2048), nn.ReLU(2048), nn.Dense(2048, 10)]))
    plain = load("here")
    x = 1e-9
    costly = plain.but(compute={"fresh_seconds_per_byte": x})

    def compute(profile, k: int) -> float:  # noqa: ANN001
        return partitioned_step(profile, shape, k, 32, bands=True, update=False).compute

    first = 4 * (4096 * 2048 + 2048)
    assert first >= FRESH_BYTES > first / 2
    vector = 4 * shape.parameters
    assert compute(costly, 1) - compute(plain, 1) == pytest.approx((first + vector) * x * plain.machine.cpu_factor)
    assert compute(costly, 2) == pytest.approx(compute(plain, 2))
    assert costly.compute.fresh_seconds(FRESH_BYTES - 1) == 0.0 and costly.compute.fresh_seconds(FRESH_BYTES) > 0


def test_a_locally_connected_layers_patches_of_32_mib_or_more_are_charged_once_forward_and_twice_back():
    """62x62x1 -> 60x60x16 -> 58x58x8 -> 10: the second layer's patches (batch 32, 3364 positions x 144 inputs)
    are 62 MB, the size of the array dbkit's layer gathers; made anew forward, and for its input's gradient
    twice more. The first layer's are 4 MB, and it computes no input gradient; in two bands, 31 MB: none."""
    from dbkit.runtime.sim.profile import FRESH_BYTES

    first, second = nn.LocallyConnected2D(62, 62, 1, kernel=3, filters=16), nn.LocallyConnected2D(60, 60, 16, 3, 8)
    net = nn.Network([first, nn.ReLU(first.out_size), second, nn.ReLU(second.out_size), nn.Dense(second.out_size, 10)])
    shape = ModelShape.of(net)
    rng = np.random.default_rng(0)
    params = {k: v.astype(np.float32) for k, v in second.init(rng).items()}
    _, patches = second.forward(params, rng.standard_normal((32, second.in_size)).astype(np.float32))
    layer = shape.layers[2]
    assert layer.patch_bytes(1.0, 32) == patches.nbytes >= FRESH_BYTES > patches.nbytes / 2
    assert shape.layers[0].patch_bytes(1.0, 32) < FRESH_BYTES and shape.layers[4].patch_bytes(1.0, 32) == 0
    assert 4 * shape.parameters < FRESH_BYTES  # no gradient array is charged: the patches alone
    plain = load("here")
    x = 1e-9
    costly = plain.but(compute={"fresh_seconds_per_byte": x})

    def compute(profile, k: int) -> float:  # noqa: ANN001
        return partitioned_step(profile, shape, k, 32, bands=True, update=False).compute

    assert compute(costly, 1) - compute(plain, 1) == pytest.approx(3 * patches.nbytes * x * plain.machine.cpu_factor)
    assert compute(costly, 2) == pytest.approx(compute(plain, 2))
