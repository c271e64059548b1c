"""Where a wired partition's partners connect: a door on its process's one wire (``wire_server``).

A Dask worker's shard wire (``dbkit.runtime.dask.wire``) is shared here when
it starts; a process without one (partitions wired in one process, a test)
gets a wire started for partitions, which ends with the last door closed.
Each door has a token of its own, which the driver gives only to the
partition's partners; the wire's loop greets them and hands each connection
to the partition's mailbox.
"""

from __future__ import annotations

import threading

from .records import WireAddress
from .wire_server import Accepted, WireServer

_SERVERS: list[WireServer] = []  # this process's shared wires, oldest first
# lock order: before a server's own lock (finding, starting or ending this process's wire for partitions)
_SERVERS_LOCK = threading.Lock()


def share(server: WireServer) -> None:
    """Let this process's wired partitions open their doors on ``server`` too (a Dask worker's shard wire)."""
    with _SERVERS_LOCK:
        _SERVERS.append(server)


def open_door(host: str, accepted: Accepted) -> tuple[WireServer, WireAddress]:
    """A door for one wired partition on this process's wire on ``host``: where its partners connect, with a
    token of its own. A partner that shows it is greeted on the wire's loop and its connection given to
    ``accepted(partner index, socket)``."""
    with _SERVERS_LOCK:
        _SERVERS[:] = [s for s in _SERVERS if not s.closed]
        server = next((s for s in _SERVERS if s.host == host), None)
        if server is None:
            server = WireServer(lambda key: None, host, ends_with_doors=True)
            _SERVERS.append(server)
        return server, server.add_door(accepted)


def close_door(server: WireServer, address: WireAddress) -> None:
    """Close a partition's door (the connections already handed over stay open); a wire started for
    partitions ends with its last door."""
    with _SERVERS_LOCK:
        if server.remove_door(address):
            server.close()
