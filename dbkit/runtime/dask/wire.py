"""The shard wire on Dask workers: a worker plugin that serves the worker's shard actors over a socket.

``dbkit.ps.wire_server`` is the server and ``dbkit.ps.wire_client`` the
replica's end; this file starts one server per worker (a ``WorkerPlugin``:
new workers get one too, and a closing worker stops its own) and tells the
driver where each listens. Dask still places the shards and carries every
call but fetch and push (issue #12, DESIGN.md "Dask facts").

Only plain ``tcp://`` workers serve a wire, on the interface the worker itself
listens on. On a cluster that uses TLS the wire stays off and replicas talk to
the shards through Dask, so no parameter leaves a worker unencrypted.
"""

from __future__ import annotations

import threading
from urllib.parse import urlparse

from distributed.diagnostics.plugin import WorkerPlugin

from ...ps.records import WireAddress
from ...ps.wire_doors import share
from ...ps.wire_server import WireServer

PLUGIN = "dbkit-shard-wire"


class ShardWirePlugin(WorkerPlugin):
    """Start a ``WireServer`` over the worker's actors when a worker starts; stop it when it closes.

    Each ``Cluster`` registers its own, under its own ``name``: closing one job's
    cluster view never stops the wire another job on the same client uses.
    """

    def __init__(self, name: str = PLUGIN) -> None:
        self.name = name
        self.server: WireServer | None = None

    def setup(self, worker) -> None:  # noqa: ANN001 - a distributed.Worker
        url = urlparse(worker.address)
        if url.scheme == "tcp" and url.hostname:
            actors = worker.state.actors
            self.server = WireServer(actors.get, url.hostname)
            share(self.server)  # the worker's wired partitions greet their partners on it too

    def teardown(self, worker) -> None:  # noqa: ANN001
        if self.server is not None:
            self.server.close()
            self.server = None


def _address(name: str, dask_worker) -> WireAddress | None:  # noqa: ANN001 - called by Client.run on each worker
    plugin = dask_worker.plugins.get(name)
    server = getattr(plugin, "server", None)
    return None if server is None else server.address


class ShardWires:
    """The wires of one ``Cluster``'s workers: started on first use, their addresses cached, stopped on close."""

    def __init__(self, client, tag: str) -> None:  # noqa: ANN001 - a distributed.Client
        self._client, self.name = client, f"{PLUGIN}-{tag}"
        # lock order: leaf (the wire's started flag and address cache; calls Dask while held, takes no dbkit lock)
        self._lock = threading.Lock()
        self._started = False
        self._addresses: dict[str, WireAddress | None] = {}

    def addresses(self, workers: list[str]) -> dict[str, WireAddress | None]:
        """Each of ``workers``' wire address (``None`` where a worker serves none, e.g. over TLS)."""
        with self._lock:
            if not self._started:
                self._client.register_plugin(ShardWirePlugin(self.name))
                self._started = True
            missing = [w for w in workers if w not in self._addresses]
            if missing:
                self._addresses.update(self._client.run(_address, self.name, workers=missing))
            return {w: self._addresses.get(w) for w in workers}

    def close(self, tell_workers: bool = True) -> None:
        """Stop every worker's wire (if this object started them). Safe to call twice. Without
        ``tell_workers`` (the scheduler is lost, and the workers with it) only forget them."""
        with self._lock:
            started, self._started = self._started, False
            self._addresses.clear()
        if started and tell_workers:
            try:
                self._client.unregister_worker_plugin(self.name)
            except Exception:  # noqa: BLE001 - workers already gone: their wires went with them
                pass
