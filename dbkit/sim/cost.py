"""What each piece of simulated work costs, in seconds, from a profile and a model's shape.

A computation holds a core for ``gradient_seconds`` (and the replica's own
vector work); a shard's service holds its queue and a core of its machine
for ``push_seconds`` / ``fetch_seconds`` / ``vector_seconds``; a message
costs its ends ``message_cpu`` and holds both NICs for its bytes. Only time
is modelled: the numbers come from ``dbkit calibrate`` (profile ``here``) or
from the paper's era (``distbelief-2012``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .profile import Profile
from .shape import LayerShape, ModelShape

FLOAT = 4  # bytes: parameters, gradients and activations travel as float32


@dataclass(frozen=True)
class CostModel:
    """Seconds of work for ``shape`` under ``profile``; ``scale`` multiplies every computation's time
    (a straggler's machine is slower)."""

    profile: Profile
    shape: ModelShape

    def gradient_seconds(self, batch: int, fraction: float = 1.0) -> float:
        """One core's seconds for the loss and gradient of ``batch`` examples (``fraction`` of the
        model's arithmetic: a partition's share), not counting the replica's own vector work."""
        c = self.profile.compute
        dense_f, local_f, units = self.shape.gradient_flops()
        per_example = (dense_f / c.dense_flops_per_second + local_f / c.local_flops_per_second
                       + units / c.elementwise_per_second)
        layers = sum(1 for layer in self.shape.layers if layer.has_params)
        return c.step_seconds + layers * c.layer_seconds + batch * per_example * fraction

    def layer_seconds(self, layer: LayerShape, batch: int, passes: float = 1.0) -> float:
        """One core's seconds for ``passes`` forward-sized passes of one layer over ``batch`` examples
        (a partition's part of a layer: the forward is 1, the input gradient 1, the parameter gradient 1)."""
        c = self.profile.compute
        if layer.kind == "dense":
            rate = c.dense_flops_per_second
        elif layer.kind == "local":
            rate = c.local_flops_per_second
        else:
            rate = c.elementwise_per_second
        return (c.layer_seconds if layer.has_params else 0.0) + passes * batch * layer.flops / rate

    def update_seconds(self, floats: int) -> float:
        """The replica's own vector work on ``floats`` parameters per step (accrue, local step, check)."""
        return floats * self.profile.compute.update_seconds_per_parameter

    def push_seconds(self, floats: int, optimizer: str) -> float:
        s = self.profile.shard
        rate = s.push_seconds_per_float_adagrad if optimizer == "adagrad" else s.push_seconds_per_float_sgd
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

    def message_cpu(self, nbytes: int) -> float:
        """CPU seconds a data message costs each of its ends."""
        m = self.profile.message
        return m.cpu_seconds + nbytes * m.cpu_seconds_per_byte
