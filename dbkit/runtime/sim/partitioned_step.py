"""What one mini-batch step of a replica split over K machines costs, from the model's shape alone
(DistBelief Sec. 3 and Fig. 3; cost-only, for models of billions of parameters).

The step is a chain of layer phases, forward then backward: before a layer can
compute, each machine receives the inputs it needs that other machines own
(all of them for a fully connected layer, the halo of its tile for a locally
connected one), then computes its part on all its cores. Spatial layers are cut
into a grid of tiles as square as K allows (81 machines: 9 x 9), fully
connected ones into K blocks of units; pooling keeps tiles aligned and needs
nothing. The loss needs every logit on machine 0: the others' go there and
their gradients come back. A phase lasts as long as its slowest machine, so
no queue arises and the chain is summed directly rather than simulated event
by event. Speed-up is the one-machine step over the K-machine step, the
quantity of the paper's Fig. 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .cost import FLOAT
from .profile import MessageSpec, Profile
from .shape import LayerShape, ModelShape


@dataclass(frozen=True)
class StepCost:
    """One step's seconds on ``machines`` machines: arithmetic, boundary exchanges, and the total; and the
    most bytes one machine received."""

    machines: int
    compute: float
    exchange: float
    bytes_in: int

    @property
    def seconds(self) -> float:
        return self.compute + self.exchange


def grid(k: int) -> tuple[int, int]:
    """Rows and columns of a grid of ``k`` tiles, as square as ``k`` allows (rows >= columns)."""
    cols = max(c for c in range(1, math.isqrt(k) + 1) if k % c == 0)
    return k // cols, cols


def _share(layer: LayerShape, k: int, rows: int, cols: int, before: tuple[float, float]) -> tuple[float, float]:
    """The largest and the smallest fraction of ``layer``'s units one machine owns."""
    if layer.spatial:
        oh, ow = layer.out_shape[0], layer.out_shape[1]
        return (math.ceil(oh / rows) * math.ceil(ow / cols) / (oh * ow), (oh // rows) * (ow // cols) / (oh * ow))
    if layer.kind == "dense":
        return math.ceil(layer.out_size / k) / layer.out_size, (layer.out_size // k) / layer.out_size
    return before  # elementwise: its input's


def _needs(layer: LayerShape, k: int, rows: int, cols: int, own_input: float = 0.0) -> tuple[float, int]:
    """Floats per example one machine receives before computing ``layer``, and from how many machines
    (``own_input``: the smallest fraction of the layer's input one machine holds)."""
    if k == 1 or layer.kind in ("pool", "elementwise"):
        return 0.0, 0
    if layer.kind == "dense":  # all of its input but the machine's own (the smallest share receives the most)
        return float(round(layer.in_size * (1 - own_input))), k - 1
    (h, w, c), (oh, ow, _) = layer.in_shape, layer.out_shape
    tile_h, tile_w = math.ceil(oh / rows), math.ceil(ow / cols)
    need_h = min(h, (tile_h - 1) * layer.stride[0] + layer.kernel[0])
    need_w = min(w, (tile_w - 1) * layer.stride[1] + layer.kernel[1])
    own = min(h, math.ceil(h / rows)) * min(w, math.ceil(w / cols))
    neighbours = (2 if rows > 1 else 0) + (2 if cols > 1 else 0) + (4 if rows > 1 and cols > 1 else 0)
    return max(0.0, (need_h * need_w - own) * c), neighbours


def _cpu(msg: MessageSpec, nbytes: float, senders: int) -> float:
    """What receiving ``nbytes`` from ``senders`` machines costs beyond the link's time, at a speed of 1: each
    message's own cost and each byte's."""
    return senders * msg.partition_message_seconds + nbytes * msg.partition_seconds_per_byte


def partitioned_step(profile: Profile, shape: ModelShape, machines: int, batch: int, bands: bool = False,
                     update: bool = True) -> StepCost:
    """The step of ``batch`` examples of ``shape`` split over ``machines`` machines of ``profile``: spatial layers
    cut into the paper's tiles (``grid``), or with ``bands`` into ``machines`` bands of rows, as dbkit's own
    partitioner cuts them (``dbkit.partition.ownership``: two neighbours each, not up to eight). Without
    ``update``, the forward and backward pass alone (its gradient gathered, ``gather_seconds_per_parameter``):
    not the replica's vector work on its parameters after it (what ``dbkit.calibration.time_partitioned_step``
    times)."""
    if machines < 1:
        raise ValueError(f"machines must be >= 1, got {machines}")
    c, m, msg = profile.compute, profile.machine, profile.message
    threads = max(1, m.threads_per_replica)
    cpu = m.cpu_factor  # a machine's speed: every computation and message's CPU, as on the engine's machines
    rows, cols = (machines, 1) if bands else grid(machines)
    compute = exchange = 0.0
    most_in = 0.0
    share = smallest = 1.0
    for i, layer in enumerate(shape.layers):
        before = smallest
        share, smallest = _share(layer, machines, rows, cols, (share, smallest))
        rate = c.rate(layer.kind, layer.working_set_bytes(share, batch))  # a smaller part may run faster
        passes = 1.0 + (1.0 if i == 0 else 2.0)  # forward; backward: parameter gradient (and input gradient)
        fixed = c.layer_seconds * (2 if layer.has_params else 0)
        compute += fixed + passes * batch * layer.flops * share / (rate * threads)
        floats, senders = _needs(layer, machines, rows, cols, before) if i > 0 else (0.0, 0)  # layer 0: the data
        if floats:  # forward: activations in; backward: their gradients back out
            nbytes = FLOAT * floats * batch
            exchange += 2 * (m.latency + nbytes / m.bandwidth + _cpu(msg, nbytes, senders) * cpu)
            most_in = max(most_in, nbytes)
    if machines > 1:  # the logits to machine 0 for the loss, and their gradients back
        nbytes = FLOAT * shape.classes * (1 - 1 / machines) * batch
        exchange += 2 * (m.latency + nbytes / m.bandwidth + _cpu(msg, nbytes, machines - 1) * cpu)
    compute += c.step_seconds + c.gather_seconds_per_parameter * shape.parameters / machines
    if update:
        compute += c.update_seconds_per_parameter * shape.parameters / machines / threads
    return StepCost(machines, compute * cpu, exchange, int(most_in))


