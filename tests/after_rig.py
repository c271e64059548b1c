"""What the tests of dbkit.after's replica loops share: a small MLP on digits, three replicas' data shards,
and a replica made over in-process shards with a client of its own (as each replica has in a job)."""

import threading
import weakref

from dbkit.after.replica_clocks import ReplicaClocks
from dbkit.data import MiniBatches, load
from dbkit.downpour.coordinators import CoordinatorEnd
from dbkit.nn import build
from dbkit.ps import ShardedParameters

DIGITS = load("digits", seed=0)
NET = build("mlp", DIGITS.n_features, DIGITS.n_classes, hidden=(16,), l2=0.0)
X, Y = DIGITS.X_train[:600], DIGITS.y_train[:600]


def rows(i: int) -> slice:
    """Replica ``i``'s data shard (of three)."""
    return slice(200 * i, 200 * (i + 1))


def batches(i: int) -> MiniBatches:
    """The mini-batches replica ``i`` draws (the same seed as ``replica``)."""
    return MiniBatches(X[rows(i)], Y[rows(i)], 16, seed=i)


_CLOCKS: "weakref.WeakKeyDictionary[object, ReplicaClocks]" = weakref.WeakKeyDictionary()


def clocks(server) -> ReplicaClocks:
    """The one coordinator (``ReplicaClocks``) the replicas over ``server``'s shards share, as a job places one."""
    if server not in _CLOCKS:
        _CLOCKS[server] = ReplicaClocks()
    return _CLOCKS[server]


def replica(cls, i: int, server, lr: float, own: ShardedParameters | None = None, **knobs):
    """Replica ``i`` of loop ``cls`` over ``server``'s shards, named ``replica{i}``, waiting for each call (its
    client ``own``, if given, is one of the shards' clients), with the coordinator its loop names."""
    own = own or ShardedParameters(server.shards, server.layout, name=f"replica{i}")
    co = CoordinatorEnd(clocks(server)) if cls.coordinator_name == "replica-clocks" else None
    return cls(i, NET, X[rows(i)], Y[rows(i)], own, 16, lr=lr, seed=i, overlap=False, coordinator=co, **knobs)


class PushOrder:
    """Which replica's push reached the shards when: each push is applied on every shard before the next
    starts (one lock), and its client's name is written down, so a test can follow the same order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []

    def client(self, server, name: str) -> ShardedParameters:
        """A client of ``server``'s in-process shards called ``name`` whose pushes are so recorded."""
        order = self

        class Recorded(ShardedParameters):
            def start_push(self, *args, **kwargs):
                with order.lock:
                    order.names.append(name)
                    return super().start_push(*args, **kwargs)

            def start_push_fetch(self, *args, **kwargs):
                with order.lock:
                    order.names.append(name)
                    return super().start_push_fetch(*args, **kwargs)

        return Recorded(server.shards, server.layout, name=name)
