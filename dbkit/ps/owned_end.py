"""A shard end its client owns, as opposed to a shard (or an actor proxy of one) that it only calls.

``ShardedParameters`` treats its shards alike except in two ways: an end it owns writes fetched
parameters straight into an array it is given (``into=``), and must be closed (``close``) when the
client is done with it. A ``WireShard`` (a connection), a ``ThreadedShard`` (a thread) and the
simulator's ``ShardEnd`` (a client's end of a simulated shard's queue) are such ends. The test is
``isinstance``, never ``hasattr``: a Dask actor proxy answers any attribute, ``close`` included (it
would call the shard's).
"""

from __future__ import annotations


class OwnedEnd:
    """Base of the shard ends a client owns: ``fetch(into=...)``, ``push_fetch(..., into=...)`` and ``close()``."""

    __slots__ = ()

    def close(self) -> None:
        """End what this end holds (a connection, a thread); the shard stays. Safe to call twice."""
