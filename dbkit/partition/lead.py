"""The lead partition starts a step on every partition of its replica with one message each.

A wired replica (``PartitionWorker.wire_up``) is driven through its partition
0, in the driver's own process (the replica's task runs beside it): ``lead``
sends each partner a ``go`` with the order (a training step, a flush, a plain
forward and backward), does its own part on the calling thread, and takes
each partner's ``done`` from its mailbox. A partner runs the order on its own
thread (``follow``) and answers with its result as JSON and its values (a
gradient) as raw float32. A partner that fails answers with its error, which
ends the lead's waits at once (``Mailbox``) instead of their timeout; a lead
that fails tells its partners to stop waiting for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..downpour.exchange import StepActions
from ..runtime.run_through import run_through
from .downpour_partition import DownpourPartition
from .worker import PartitionWorker

Result = tuple[dict[str, Any], "np.ndarray | None"]  # a partition's result (JSON) and its values


def perform(partition: PartitionWorker, step: int, op: str, orders: dict[str, Any]) -> Result:
    """Order ``op`` as step ``step`` on this thread: ``run`` (a forward and backward pass on the batch left
    there), or a Downpour partition's ``step`` or ``flush``; its result (JSON) and values (a gradient)."""
    if op == "run":
        out = run_through(partition.run_step(step, None, None, bool(orders.get("return_grad", True))))
        grad = out.pop("grad")
        return {**out, "loss": None if out["loss"] is None else float(out["loss"])}, grad
    if op in ("step", "flush") and isinstance(partition, DownpourPartition):
        if op == "step":
            actions = StepActions(*(bool(a) for a in orders["actions"]))
            return run_through(partition.downpour_step(step, actions, float(orders["lr"]))).to_json(), None
        return {"figures": run_through(partition.flush()).to_json()}, None
    raise ValueError(f"partition {partition.index}: unknown order {op!r}")


def lead(partition: PartitionWorker, step: int, op: str, orders: dict[str, Any]) -> list[Result]:
    """Run order ``op`` (with ``orders``) as step ``step`` on every partition of ``partition``'s replica;
    each partition's result, in partition order."""
    link = partition.link
    if link is None:
        raise RuntimeError(f"partition {partition.index} is not wired: it cannot lead")
    me, k = partition.index, partition.k
    n = link.next_order()
    go = {"op": op, "step": int(step), **orders}
    partners = [j for j in range(k) if j != me]
    out: list[Result | None] = [None] * k
    try:
        for j in partners:
            link.post(j, (n, "go"), None, go)
        out[me] = perform(partition, step, op, orders)
        for j in partners:
            values, meta = link.mailbox.take((n, "done", j))
            out[j] = (meta or {}, values)
    except BaseException as e:
        stop(partition, partners, f"the lead partition {me} failed: {type(e).__name__}: {e}")
        raise
    return [r for r in out if r is not None]


def follow(partition: PartitionWorker, sender: int, n: int, orders: dict[str, Any]) -> None:
    """Run a lead's order on this partition's thread and answer it (with the error, if it fails)."""
    link = partition.link
    assert link is not None
    try:
        meta, values = perform(partition, int(orders["step"]), str(orders["op"]), orders)
    except Exception as e:  # noqa: BLE001 - the lead raises it
        meta, values = {"error": f"{type(e).__name__}: {e}"}, None
    try:
        link.post(sender, (n, "done", partition.index), values, meta)
    except Exception:  # noqa: BLE001 - the lead is gone: nobody waits for the answer
        pass


def stop(partition: PartitionWorker, partners: list[int], reason: str) -> None:
    """Tell ``partners`` to stop waiting for this step (best effort: a partner may be gone)."""
    link = partition.link
    assert link is not None
    for j in partners:
        try:
            link.post(j, (0, "go"), None, {"op": "stop", "reason": reason})
        except Exception:  # noqa: BLE001
            pass
