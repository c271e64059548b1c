import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
md("""# 1. Foundations: a network, a parameter server, and the baseline

DistBelief (Dean et al., NIPS 2012) trains one model with many machines. Before anything is distributed,
this notebook builds the pieces every later notebook uses:

1. a **network** whose parameters are one flat vector (so a server can own slices of it),
2. **parameter shards** that own those slices and apply the gradients pushed to them (Sec. 4.1),
3. **synchronous SGD**, the single-replica baseline, first in memory and then with its parameters living on
   shard actors on a Dask cluster.

Set `DBKIT_SMALL=1` for quick sizes (Binder and CI do)."""),
code("""import numpy as np
import dbkit
from dbkit import data, nn
from dbkit.config import RunConfig

digits = data.load("digits")
digits.summary()"""),
md("""## The network and its flat parameter vector

`nn.build` makes a preset. Every parameter lives in one float32 vector; each layer sees named *views* of it."""),
code("""net = nn.build("mlp", digits.n_features, digits.n_classes, hidden=(64,), l2=1e-4)
print(net.describe())
for spec in net.specs:
    print(f"{spec.name:>5}  [{spec.start:>5}, {spec.stop:>5})  shape {spec.shape}")"""),
md("""A gradient is only trustworthy once it agrees with **central differences**. `check_network` returns the
largest relative error over a sample of coordinates."""),
code("""X, y = digits.X_train[:8], digits.y_train[:8]
print("mlp         ", nn.check_network(net, X, y))
print("image-local ", nn.check_network(nn.build("image-local", 64, 10, l2=1e-4), X, y))"""),
md("""## A parameter shard, in process

A shard owns `params[start:stop]`. A replica **fetches** `(version, copy)`, computes a gradient, and
**pushes** it with the version it fetched. The difference between the shard's version now and that version is
the push's **staleness**: how many other updates landed in between. A push with NaN is refused and changes nothing."""),
code("""from dbkit.ps import ParameterShard

shard = ParameterShard(index=0, start=0, stop=4, initial=np.ones(4), optimizer="adagrad", lr=0.1)
v, values = shard.fetch()
shard.push(np.full(4, 0.5), fetched_version=v)
shard.push(np.full(4, 0.5), fetched_version=v)          # computed from the same, now stale, fetch
print(shard.push(np.array([1, np.nan, 0, 0]), fetched_version=v))  # refused
shard.stats()["staleness"], shard.stats()["rejected"]"""),
md("""## Synchronous SGD: in memory, then through shards on Dask

The baseline: one replica, fetch, gradient, push, every step. With a `server`, the parameters live on
`ParameterShard` actors on Dask workers; the result is bit-identical, only slower, since every step is now two
round trips. That cost is the reason Downpour fetches and pushes less often."""),
code("""steps = 150 if data.small() else 600
config = RunConfig(steps=steps, eval_every=steps // 6, lr=0.05)
net = nn.build("mlp", digits.n_features, digits.n_classes, l2=config.l2)

from dbkit.algorithms import SyncSGD
local = SyncSGD(net, digits, config)
local.fit()
print("in memory:", local.history[-1])"""),
code("""from dbkit.cluster import Cluster, start_shards

with Cluster(n_workers=2) as cluster:
    server = start_shards(cluster, net.init_params(config.seed), n_shards=2, optimizer="sgd", lr=config.lr)
    print("shards on", server.workers)
    remote = SyncSGD(net, digits, config, server=server)
    remote.fit()
    final_params = server.fetch()
    shard_stats = server.stats()

print("through shards:", remote.history[-1])
print("bit-identical to in-memory SGD:", final_params.tobytes() == local.params.tobytes())
print("seconds per step, in memory vs through shards:",
      round(local.train_seconds / steps, 5), round(remote.train_seconds / steps, 5))"""),
code("""from IPython.display import Image
from dbkit.telemetry import plot_history
Image(filename=str(plot_history(remote.history, "plots/foundations.png", "sync SGD through 2 shards")))"""),
md("""Next: **Downpour SGD**, where many replicas do this at once, without waiting for each other."""),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/01_foundations.ipynb")
