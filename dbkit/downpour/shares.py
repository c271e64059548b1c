"""A number of steps in whole shares: what a Downpour driver caps each replica at when a budget of steps
over all replicas is shared among them (``Fleet.share_caps``)."""

from __future__ import annotations


def split(steps: int, weights: list[float]) -> list[int]:
    """``steps`` in whole shares in proportion to ``weights`` (all zero: equal), largest remainders first."""
    if not weights:
        return []
    total = sum(weights)
    exact = [steps * w / total for w in weights] if total > 0 else [steps / len(weights)] * len(weights)
    shares = [int(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda k: shares[k] - exact[k])
    for k in by_remainder[:steps - sum(shares)]:
        shares[k] += 1
    return shares
