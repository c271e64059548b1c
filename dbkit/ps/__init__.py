"""The sharded parameter server (DistBelief Sec. 4.1), numpy only."""

from .checkpoint import (
    Checkpoint,
    CheckpointError,
    Manifest,
    ShardState,
    read_checkpoint,
    read_manifest,
    read_shard,
    shard_file,
    write_manifest,
)
from .client import Pending, ShardedParameters, resolve
from .layout import ShardLayout, balanced_layout
from .records import Histogram, PushAnswer, ShardFigures, staleness_summary
from .rules import OPTIMIZERS, SGD, Adagrad, check_lr
from .shard import ParameterShard
from .update_rule import UpdateRule, describe_rules, make_rule, register_rule, registered_rules, rule_class


def local_shards(initial, n_shards: int, optimizer: str | UpdateRule = "sgd", lr: float = 0.1) -> ShardedParameters:
    """In-process shards over ``initial``, for tests and single-process runs."""
    layout = balanced_layout(len(initial), n_shards)
    shards = [ParameterShard(i, a, b, initial[a:b], optimizer, lr) for i, (a, b) in enumerate(layout.ranges)]
    return ShardedParameters(shards, layout)


__all__ = [
    "Checkpoint", "CheckpointError", "Manifest", "ShardState", "read_checkpoint", "read_manifest", "read_shard",
    "shard_file", "write_manifest", "Histogram", "OPTIMIZERS", "ParameterShard", "Pending", "PushAnswer",
    "ShardFigures", "ShardLayout", "ShardedParameters", "UpdateRule", "balanced_layout", "check_lr", "local_shards",
    "resolve", "staleness_summary", "SGD", "Adagrad", "describe_rules", "make_rule", "register_rule",
    "registered_rules", "rule_class",
]
