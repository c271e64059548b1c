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
    """What receiving ``nbytes`` from ``senders`` machines costs beyond the link's time, at a speed of 1: the
    exchange's own cost, each message's and each byte's."""
    return (msg.partition_exchange_seconds + senders * msg.partition_message_seconds
            + nbytes * msg.partition_seconds_per_byte)


#: steps of a chain run at most to find the one that leaves a link's token bucket as it found it
STEADY_PASSES = 100


@dataclass
class _Link:
    """A machine's NIC as a token bucket (``MachineSpec.burst_bytes``; 0: every byte at the rate): bytes that
    find tokens leave at once, the rest at the rate; tokens come back at the rate, up to the bucket's depth."""

    bandwidth: float
    burst: float
    tokens: float = 0.0
    at: float = 0.0

    def send(self, nbytes: float, now: float) -> float:
        """Seconds ``nbytes`` sent at ``now`` (seconds into the chain) wait for the link."""
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.bandwidth)
        taken = min(self.tokens, nbytes)
        self.tokens -= taken
        wait = (nbytes - taken) / self.bandwidth
        self.at = now + wait  # while the rest goes out at the rate, every token that comes is taken
        return wait


def _chain(profile: Profile, shape: ModelShape, machines: int, batch: int, bands: bool, update: bool
           ) -> tuple[list[tuple[float, float, int]], int]:
    """A step as its phases in order (forward, the logits there and back, backward, the step's own work), each
    ``(compute seconds at a speed of 1, bytes in, senders)``: a computation has no bytes, an exchange no
    compute; and the most bytes one machine receives in one exchange."""
    c = profile.compute
    threads = max(1, profile.machine.threads_per_replica)
    rows, cols = (machines, 1) if bands else grid(machines)
    forward: list[tuple[float, float, int]] = []
    backward: list[tuple[float, float, int]] = []
    most_in = 0.0
    share = smallest = 1.0
    for i, layer in enumerate(shape.layers):
        before = smallest
        share, smallest = _share(layer, machines, rows, cols, (share, smallest))
        rate = c.rate(layer.kind, layer.working_set_bytes(share, batch))  # a smaller part may run faster
        one = batch * layer.flops * share / (rate * threads)  # a forward-sized pass
        fixed = c.layer_seconds if layer.has_params else 0.0  # each way
        floats, senders = _needs(layer, machines, rows, cols, before) if i > 0 else (0.0, 0)  # layer 0: the data
        nbytes = FLOAT * floats * batch
        if floats:  # forward: activations in; backward: their gradients back out
            forward.append((0.0, nbytes, senders))
            most_in = max(most_in, nbytes)
        patches = c.fresh_seconds(layer.patch_bytes(share, batch))  # a locally connected layer's, made anew
        forward.append((fixed + one + patches, 0.0, 0))
        made = c.fresh_seconds(FLOAT * layer.params * share) + (0.0 if i == 0 else 2 * patches)  # its weights'
        back = [(fixed + (1.0 if i == 0 else 2.0) * one + made, 0.0, 0)]  # gradient; the input's: 2 patch arrays
        backward[:0] = back + ([(0.0, nbytes, senders)] if floats else [])
    logits = []
    if machines > 1:  # the logits to machine 0 for the loss, and their gradients back
        nbytes = FLOAT * shape.classes * (1 - 1 / machines) * batch
        logits = [(0.0, nbytes, machines - 1)] * 2
    own = c.step_seconds + c.gather_seconds_per_parameter * shape.parameters / machines
    own += c.fresh_seconds(FLOAT * shape.parameters / machines)  # the partition's gradient vector
    if update:
        own += c.update_seconds_per_parameter * shape.parameters / machines / threads
    return forward + logits + backward + [(own, 0.0, 0)], int(most_in)


def partitioned_step(profile: Profile, shape: ModelShape, machines: int, batch: int, bands: bool = False,
                     update: bool = True) -> StepCost:
    """The step of ``batch`` examples of ``shape`` split over ``machines`` machines of ``profile``: spatial layers
    cut into the paper's tiles (``grid``), or with ``bands`` into ``machines`` bands of rows, as dbkit's own
    partitioner cuts them (``dbkit.partition.ownership``: two neighbours each, not up to eight). Without
    ``update``, the forward and backward pass alone (its gradient gathered, ``gather_seconds_per_parameter``):
    not the replica's vector work on its parameters after it (what ``dbkit.calibration.time_partitioned_step``
    times). With a NIC's token bucket (``burst_bytes``), a step among many like it: steps are run from a full
    bucket (or one of a step's bytes, which waits the same) until one leaves it as it found it (a step that
    sends more than the link carries in its time empties it: in the long run no bucket beats the rate)."""
    if machines < 1:
        raise ValueError(f"machines must be >= 1, got {machines}")
    m, msg = profile.machine, profile.message
    cpu = m.cpu_factor  # a machine's speed: every computation and message's CPU, as on the engine's machines
    phases, most_in = _chain(profile, shape, machines, batch, bands, update)
    sent = sum(nbytes for _, nbytes, _ in phases)  # tokens beyond a step's bytes change none of its waits
    link = _Link(m.bandwidth, m.burst_bytes, tokens=min(m.burst_bytes, sent))
    now, before = 0.0, -1.0
    for _ in range(STEADY_PASSES if m.burst_bytes else 1):  # until a step leaves the bucket as it found it
        if abs(link.tokens - before) <= 1e-9 * m.burst_bytes:
            break
        before = link.tokens
        compute = exchange = 0.0
        for seconds, nbytes, senders in phases:
            if nbytes:
                took = m.latency + link.send(nbytes, now) + _cpu(msg, nbytes, senders) * cpu
                exchange += took
            else:
                took = seconds * cpu
                compute += took
            now += took
        link.send(0.0, now)  # the tokens the step's end finds
    return StepCost(machines, compute, exchange, most_in)
