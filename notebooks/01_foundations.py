# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1. Foundations: a network, a parameter server, and the baseline
#
# DistBelief (Dean et al., NIPS 2012) trains one model with many machines. Before anything is distributed,
# this notebook builds the pieces every later notebook uses:
#
# 1. a **network** whose parameters are one flat vector (so a server can own slices of it),
# 2. **parameter shards** that own those slices and apply the gradients pushed to them (Sec. 4.1),
# 3. **synchronous SGD**, the single-replica baseline, first in memory and then with its parameters living on
#    shard actors on a Dask cluster.
#
# Set `DBKIT_SMALL=1` for quick sizes (Binder and CI do).

# %%
import numpy as np

import dbkit
from dbkit import data, nn

digits = data.load("digits")
digits.summary()

# %% [markdown]
# ## The network and its flat parameter vector
#
# `nn.build` makes a preset. Every parameter lives in one float32 vector; each layer sees named *views* of it.

# %%
net = nn.build("mlp", digits.n_features, digits.n_classes, hidden=(64,), l2=1e-4)
print(net.describe())
for spec in net.specs:
    print(f"{spec.name:>5}  [{spec.start:>5}, {spec.stop:>5})  shape {spec.shape}")

# %% [markdown]
# A gradient is only trustworthy once it agrees with **central differences**. `check_network` returns the
# largest relative error over a sample of coordinates.

# %%
X, y = digits.X_train[:8], digits.y_train[:8]
print("mlp         ", nn.check_network(net, X, y))
print("image-local ", nn.check_network(nn.build("image-local", 64, 10, l2=1e-4), X, y))

# %% [markdown]
# ## A parameter shard, in process
#
# A shard owns `params[start:stop]`. A replica **fetches** `(version, copy)`, computes a gradient, and
# **pushes** it with the version it fetched. The difference between the shard's version now and that version is
# the push's **staleness**: how many other updates landed in between. Its **age** counts the examples behind
# those updates (and its own). A push with NaN is refused and changes nothing.

# %%
from dbkit.ps import ParameterShard

shard = ParameterShard(index=0, start=0, stop=4, initial=np.ones(4), optimizer="adagrad", lr=0.1)
v, values = shard.fetch()
print(shard.push(np.full(4, 0.5), fetched_version=v, examples=32))
print(shard.push(np.full(4, 0.5), fetched_version=v, examples=32))  # computed from the same, now stale, fetch
print(shard.push(np.array([1, np.nan, 0, 0]), fetched_version=v))  # refused
figures = shard.figures()
figures.staleness.summary(), figures.age.summary(), figures.rejected

# %% [markdown]
# ## Synchronous SGD: in memory, then through shards on Dask
#
# The baseline: one replica, fetch, gradient, push, every step. `dbkit.SyncSGD` is a *job*, driven like every
# other algorithm in dbkit: `fit`, `start`, `pause`, `set`, `stop`, `history`, `events`, `report()`. In memory
# the parameters are a plain vector; with `on_cluster=True` they live on `ParameterShard` actors on Dask workers.
# The result is bit-identical, only slower, since every step is now two round trips. That cost is the reason
# Downpour fetches and pushes less often.

# %%
steps = 150 if data.small() else 600
with dbkit.SyncSGD(net, digits, lr=0.05, eval_every=steps // 6) as local:
    local.fit(steps=steps, progress=False)
print("in memory:", local.history[-1])

# %%
with dbkit.SyncSGD(net, digits, lr=0.05, eval_every=steps // 6, on_cluster=True, shards=2) as remote:
    remote.fit(steps=steps, progress=False)
    print("shards on", [s.worker for s in remote.shards()])
report = remote.report()
print("through shards:", remote.history[-1])
print("bit-identical to in-memory SGD:", remote.parameters().tobytes() == local.parameters().tobytes())
print("examples per second, in memory vs through shards:",
      round(local.report()["examples_per_second"]), round(report["examples_per_second"]))

# %%
from IPython.display import Image

from dbkit.telemetry import plot_history

Image(filename=str(plot_history(remote.history, "plots/foundations.png", "sync SGD through 2 shards")))

# %% [markdown]
# Next: **Downpour SGD**, where many replicas do this at once, without waiting for each other.
