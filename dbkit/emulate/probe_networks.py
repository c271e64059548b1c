"""The networks the emulated cluster's probes time (``probe_network``): what a host computes per flop of each
kind, how that depends on a part's size, and what a partitioned step's exchanges cost beyond the links
(``dbkit.calibration.host_probes`` measures them; ``dbkit.emulate.profile`` and ``dbkit.emulate.exchange_fit``
turn them into a simulator profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..nn import Network

PROBE_BATCH = 32
BULK_UNITS = 16384


def probe_network(model: str = "speech") -> Network:
    """The network a compute probe times: ``"speech"``, the speech preset (dense layers: its gradient sets the
    host's speed); ``"local"``, one unshared 5x5 locally connected layer of 16 filters on 32x32x8 inputs and a
    softmax layer (its gradient sets the speed of locally connected arithmetic, which numpy does far less
    efficiently than a matrix product); ``"dense"``, a 2048-1024-10 fully connected network (big matrix
    products, which run far faster per flop than the speech preset's small ones). ``"dense-small"`` and
    ``"local-small"`` are the same with a part of the first layer's units, about what one of 8 partitions
    computes (1/8 of the dense units, 4 of the 28 rows of positions): their rates against the full probes'
    say how much faster a smaller working set runs (``ComputeSpec.rate``). ``"bulk"``, 8-16384-2 fully
    connected: in two partitions its boundary is a mebibyte each way a step (batch 32), with little
    arithmetic, for what a boundary byte costs beyond the link; ``"thin"``, 8-128-128-128-128-8: in two
    partitions ten boundary messages of 8 KiB a step, for what a message costs in a step that keeps its host
    busy (``dbkit.emulate.exchange_fit``)."""
    from ..nn import Dense, LocallyConnected2D, Network, ReLU, build

    if model == "speech":
        return build("speech", 440, 64)
    if model in ("local", "local-small"):
        lc = LocallyConnected2D(32 if model == "local" else 8, 32, 8, kernel=5, filters=16)
        return Network([lc, ReLU(lc.out_size), Dense(lc.out_size, 10)], name=f"{model} probe")
    if model in ("dense", "dense-small"):
        units = 1024 if model == "dense" else 128
        return Network([Dense(2048, units), ReLU(units), Dense(units, 10)], name=f"{model} probe")
    if model == "bulk":
        return Network([Dense(8, BULK_UNITS), ReLU(BULK_UNITS), Dense(BULK_UNITS, 2)], name="bulk probe")
    if model == "thin":
        hidden = [layer for _ in range(3) for layer in (ReLU(128), Dense(128, 128))]
        return Network([Dense(8, 128), *hidden, ReLU(128), Dense(128, 8)], name="thin probe")
    raise ValueError(f"model must be one of {', '.join(PROBE_MODELS)}, got {model!r}")


PROBE_MODELS = ("speech", "dense", "local", "dense-small", "local-small", "bulk", "thin")


def probe_working_set(model: str, batch: int = PROBE_BATCH) -> float:
    """Bytes the first layer of ``probe_network(model)`` touches (``LayerShape.working_set_bytes``)."""
    from ..runtime.sim.shape import ModelShape

    return ModelShape.of(probe_network(model)).layers[0].working_set_bytes(1.0, batch)
