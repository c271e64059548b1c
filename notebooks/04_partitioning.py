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
# # 4. Model partitioning: one replica split across workers
#
# DistBelief Sec. 3. A network too big or too slow for one machine is split **by units**: each of K
# **partitions** owns some units of every layer, holds their parameters, and computes their part of the
# forward and backward passes. Only the activations (forward) and gradients (backward) of units whose
# connections **cross a partition boundary** are sent. A **locally connected** layer (each unit sees a small
# patch of the layer below) needs only a thin band at the boundary; a **fully connected** layer needs
# all-to-all traffic. That is why the paper's speedups grow with machines for locally connected models and
# flatten for dense ones.
#
# Inside Downpour (Sec. 4.1), each partition of a replica fetches from and pushes to **only the parameter
# shards that hold its own parameters**. `DBKIT_SMALL=1` keeps this notebook quick.

# %%
import numpy as np
from IPython.display import Image

import dbkit
from dbkit import data, nn
from dbkit.partition import boundary_floats, describe, ownership

digits = data.load("digits")  # 8x8 images
net = nn.build("image-local", digits.n_features, digits.n_classes, image_shape=digits.image_shape)
print(net.describe())

# %% [markdown]
# ## Who owns what, and what must cross
#
# `describe(model, K)` gives, per layer, the units and parameters of each partition and how many activations per
# example the layer reads from other partitions. Locally connected layers are cut into bands of rows of
# positions; the dense layer on top is cut into blocks of units.

# %%
for K in (2, 3):
    print(f"K = {K}")
    for r in describe(net, K):
        print(f"  layer {r['layer']}: {r['kind']:<45} units {str(r['units_per_partition']):<16} "
              f"params {str(r['params_per_partition']):<22} reads {r['cross_floats_per_example']:>4}/example")

# %%
from dbkit.telemetry import plot_partitions

plot_partitions(net, 2, "plots/partitions.png")
Image(filename="plots/partitions.png")

# %% [markdown]
# Each dot is an activation another partition reads. In the locally connected layers only the rows next to
# the boundary cross; the dense layer reads everything from everybody.
#
# ## Locally connected against fully connected
#
# The same network with every locally connected layer replaced by a dense layer of the same units (its
# "fully connected twin"): per layer, the activations per example each layer reads from other partitions.
# Only layer 2 differs: a locally connected layer needs a boundary band, a dense one everything. (Layer 4 is
# dense in both; it is what dominates this small model's traffic.)

# %%
twin = nn.Network([nn.Dense(layer.in_size, layer.out_size) if layer.kind.startswith("local") else layer
                   for layer in net.layers], name="fully connected twin")
for K in (2, 3, 4):
    lc = [r["cross_floats_per_example"] for r in describe(net, K)]
    fc = [r["cross_floats_per_example"] for r in describe(twin, K)]
    print(f"K={K}: layer 2 locally connected {lc[2]:>4}, fully connected {fc[2]:>4}   "
          f"(whole network: {boundary_floats(ownership(net, K))['forward']:>4} vs "
          f"{boundary_floats(ownership(twin, K))['forward']:>4})")

# %% [markdown]
# ## The partitions as Dask actors, checked against the whole network
#
# Each partition is an actor on its own worker; they exchange boundary activations and gradients directly.
# The loss and gradient must equal the unpartitioned network's.

# %%
from dbkit.cluster import ActorPartitionedNetwork, Cluster

with Cluster(n_workers=2) as cluster:
    params = net.init_params(0)
    X, y = digits.X_train[:64], digits.y_train[:64]
    loss, grad = net.loss_and_grad(params, X, y)
    split = ActorPartitionedNetwork(cluster, net, 2)
    ploss, pgrad = split.loss_and_grad(params, X, y)
    print("loss", loss, "partitioned", ploss, "| largest gradient difference", float(np.abs(grad - pgrad).max()))
    print("bytes between partitions", split.bytes_between_partitions, "minimum", split.minimum_bytes(len(y)))

# %% [markdown]
# ## Inside Downpour: 2 replicas of 2 partitions
#
# Every shard holds one partition's parameters; each partition fetches and pushes its own. The shards count
# who pushed to them.

# %%
small = data.small()
job = dbkit.DownpourSGD(net, digits, replicas=2, shards=2, partitions=2, optimizer="adagrad", lr=0.05,
                        eval_every=50)
job.fit(steps=400 if small else 2000, progress=False)
report = job.report()
print("test accuracy", round(report["final"]["test_accuracy"], 4))
print("bytes between partitions", report["bytes"]["between_partitions"],
      "minimum", report["bytes"]["between_partitions_min"])
for s in job.shards():
    print(f"shard {s.index} (partition {job.layout.owner_of_shard(s.index)}): pushed by {s.pushers}")

# %% [markdown]
# ## Re-partition while it trains
#
# `set(partitions=K)` stops the replicas (each pushes what it accumulated), moves the parameters **and the
# Adagrad accumulators** to shards aligned to the new partitions, and starts the replicas again. The loss carries
# on from where it was.

# %%
from dbkit.telemetry import Relayout, plot_history

before = job.evaluate().full_batch_loss
job.set(partitions=1)
print("full-batch loss before", round(before, 5), "after", round(job.evaluate().full_batch_loss, 5))
job.fit(steps=200 if small else 1000, progress=False)
job.set(partitions=2)
job.fit(steps=200 if small else 1000, progress=False)
print([(e.step, e.partitions, e.shards) for e in job.events.of(Relayout)])
job.stop()
Image(filename=str(plot_history(job.report()["history"], "plots/partitioned_downpour.png",
                                "Downpour + Adagrad, partitions 2 -> 1 -> 2")))

# %% [markdown]
# Things to try: `partitions=3` with `shards=3`; a dense model (`"mlp"`) and compare the bytes between
# partitions; `benchmarks/partition_speedup.py` for time per step against K (there a locally connected
# model gains about 1.5x at K = 2 on two cores, a fully connected one less).
