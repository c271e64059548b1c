"""What each piece of simulated work costs, in seconds, from a profile and a model's shape.

A computation holds a core for ``gradient_parts`` (and the replica's own
vector work); a shard's service holds its queue and a core of its machine
for ``push_seconds`` / ``fetch_seconds`` / ``vector_seconds``; a message
costs its ends ``message_cpu`` and holds both NICs for its bytes. Only time
is modelled: the numbers come from ``dbkit calibrate`` (profile ``here``) or
from the paper's era (``distbelief-2012``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from ...ps.update_rule import rule_class
from .profile import Profile
from .shape import LayerShape, ModelShape

FLOAT = 4  # bytes: parameters, gradients and activations travel as float32


@dataclass(frozen=True)
class CostModel:
    """Seconds of work for ``shape`` under ``profile``; ``scale`` multiplies every computation's time
    (a straggler's machine is slower)."""

    profile: Profile
    shape: ModelShape

    def __post_init__(self) -> None:  # a gradient's line in the batch size, worked out once (asked every step)
        c = self.profile.compute
        line = self.profile.measured.get("gradients", {}).get(self.shape.key)
        if line is not None:  # this very model was timed by ``dbkit calibrate``: its own line in the batch size
            worker = self.profile.measured.get("gradient_factor", {}).get(self.shape.key, 1.0)  # in a real worker
            fixed, per_example, scaled = float(line[0]) * worker, float(line[1]) * worker, True
        else:
            dense_f, local_f, units = self.shape.gradient_flops()
            per_example = (dense_f / c.dense_flops_per_second + local_f / c.local_flops_per_second
                           + units / c.elementwise_per_second)
            layers = sum(1 for layer in self.shape.layers if layer.has_params)
            fixed, scaled = c.step_seconds + layers * c.layer_seconds, False
        object.__setattr__(self, "_line", (fixed, per_example, scaled))
        table = self.profile.measured.get("wire_cpu")  # sizes and each end's column, read once (asked per message)
        object.__setattr__(self, "_wire", (tuple(float(row[0]) for row in table),
                                           {end: tuple(float(row[col]) for row in table)
                                            for col, end in enumerate(("client", "server", "local"), start=1)})
                           if table else None)

    def gradient_parts(self, batch: int, fraction: float = 1.0) -> tuple[float, float]:
        """One core's seconds for the loss and gradient of ``batch`` examples (``fraction`` of the model's
        arithmetic: a partition's share), not counting the replica's own vector work, as its serial part (the
        step's and layers' fixed work, on one core however many threads the replica has) and its parallel
        part (the arithmetic, split across its threads): Amdahl's law, as ``partitioned_step`` counts a
        partition's step."""
        fixed, per_example, scaled = self._line  # type: ignore[attr-defined]
        if scaled:  # a measured line: a partition does its share of all of it
            return fixed * fraction, per_example * batch * fraction
        return fixed, batch * per_example * fraction

    def layer_parts(self, layer: LayerShape, batch: int, passes: float = 1.0) -> tuple[float, float]:
        """One core's seconds for ``passes`` forward-sized passes of one layer over ``batch`` examples (a
        partition's part of a layer: the forward is 1, the input gradient 1, the parameter gradient 1), as its
        serial part (the layer's fixed work) and its parallel part (its arithmetic)."""
        c = self.profile.compute
        return (c.layer_seconds if layer.has_params else 0.0), passes * batch * layer.flops / c.rate(layer.kind)

    def update_seconds(self, floats: int) -> float:
        """A replica's own work per step beyond its gradient: a fixed part, and its vector work on ``floats``
        parameters (accrue, local step, finiteness check)."""
        c = self.profile.compute
        return c.replica_step_seconds + floats * c.update_seconds_per_parameter

    def task_seconds(self) -> float:
        """One way of a work unit or a flush sent to a replica."""
        m = self.profile.message
        return m.task_seconds or m.control_seconds

    def partition_call_seconds(self) -> float:
        """One way of a partitioned replica's call to one of its partitions each step (an actor call)."""
        return self.profile.message.partition_message_seconds

    def push_seconds(self, floats: int, optimizer: str) -> float:
        s = self.profile.shard
        # a rule that keeps state per parameter makes Adagrad's extra passes over it; one without, SGD's
        rate = s.push_seconds_per_float_adagrad if rule_class(optimizer).keeps_state else s.push_seconds_per_float_sgd
        return s.request_seconds + floats * rate

    def fetch_seconds(self, floats: int) -> float:
        s = self.profile.shard
        return s.request_seconds + floats * s.fetch_seconds_per_float

    def vector_seconds(self, floats: int) -> float:
        """A Sandblaster command on a shard's named vectors (dot, axpy, copy, accumulate)."""
        s = self.profile.shard
        return s.request_seconds + floats * s.vector_seconds_per_float

    def message_bytes(self, floats: int) -> int:
        return FLOAT * int(floats) + self.profile.message.header_bytes

    def message_cpu(self, nbytes: int, end: str = "client") -> float:
        """CPU seconds a data message of ``nbytes`` costs one of its ends (``client``: a replica's, ``server``:
        a shard's; ``local``: a call between the two on one machine): from the profile's measured table where
        it has one (interpolated between its sizes, and beyond its largest at the last step's cost per
        byte), else its line (and nothing for a local call)."""
        m = self.profile.message
        wire = self._wire  # type: ignore[attr-defined]
        if wire is None:
            return 0.0 if end == "local" else m.wire_scale * (m.cpu_seconds + nbytes * m.cpu_seconds_per_byte)
        sizes, cost = wire[0], wire[1][end]
        if nbytes >= sizes[-1] and len(sizes) > 1:
            per_byte = (cost[-1] - cost[-2]) / (sizes[-1] - sizes[-2])
            return m.wire_scale * (cost[-1] + (nbytes - sizes[-1]) * max(0.0, per_byte))
        i = bisect.bisect_right(sizes, nbytes)
        if i == 0:
            return m.wire_scale * cost[0]
        (b0, b1), (c0, c1) = sizes[i - 1 : i + 1], cost[i - 1 : i + 1]  # np.interp's line, without its arrays
        return m.wire_scale * (c0 + (c1 - c0) * (nbytes - b0) / (b1 - b0))
