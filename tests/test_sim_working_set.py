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
    with pytest.raises(ProfileError, match="local_working_set_exponent must be at most 1"):
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


def test_a_boundary_byte_costs_its_per_byte_charge_at_each_end_of_each_exchange():
    """Dense(10, 8), ReLU, Dense(8, 4) in two bands, batch 5: the second layer's half of its input is 4 floats
    an example from the other machine (80 bytes), the logits' other half 2 floats an example (40 bytes); each
    goes forward and its gradient back. Charging x a byte adds 2 (80 + 40) x, times the machine's speed."""
    shape = ModelShape.of(nn.Network([nn.Dense(10, 8), nn.ReLU(8), nn.Dense(8, 4)]))
    plain = load("here")
    x = 1e-6
    costly = plain.but(message={"partition_seconds_per_byte": x})

    def exchange(profile, k: int) -> float:  # noqa: ANN001
        return partitioned_step(profile, shape, k, 5, bands=True, update=False).exchange

    assert exchange(costly, 2) - exchange(plain, 2) == pytest.approx(2 * (80 + 40) * x * plain.machine.cpu_factor)
    assert exchange(costly, 1) == exchange(plain, 1) == 0.0  # one machine sends nothing
    assert plain.message.partition_seconds_per_byte == load("distbelief-2012").message.partition_seconds_per_byte == 0
    with pytest.raises(ProfileError, match="partition_seconds_per_byte"):
        plain.but(message={"partition_seconds_per_byte": -1e-9})
