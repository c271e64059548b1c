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
# # 1. The parameter server: why shard it, and what does the wire cost?
#
# **The question** (DistBelief Sec. 4.1). Every model replica needs the current parameters and must hand back
# its gradient. The paper puts the parameters on a **parameter server split into shards**: each shard owns a
# contiguous slice, applies the gradients pushed to it on its own, and never waits for the others. What does a
# **fetch** (get the parameters) and a **push** (send a gradient) cost, against the size of the model and the
# number of shards, and what does that cost mean for how often a replica should fetch and push?

# %%
import numpy as np

import dbkit
from dbkit import data, nn
from dbkit.calibration import time_roundtrip
from dbkit.ps import ParameterShard
from dbkit.telemetry import plot_lines

small = data.small()
cluster = dbkit.Cluster(n_workers=2)  # two worker processes on this machine
cluster

# %% [markdown]
# ## One shard, in process
#
# A shard owns `params[start:stop]`. A replica **fetches** `(version, copy)`, computes a gradient, and **pushes**
# it with the version it fetched. The shard's version now minus that version is the push's **staleness**: how
# many other updates landed in between. A push holding NaN is refused and changes nothing.

# %%
shard = ParameterShard(index=0, start=0, stop=4, initial=np.ones(4), optimizer="sgd", lr=0.1)
version, values = shard.fetch()
print(shard.push(np.full(4, 0.5), fetched_version=version, examples=32))
print(shard.push(np.full(4, 0.5), fetched_version=version, examples=32))  # from the same, now stale, fetch
print(shard.push(np.array([1, np.nan, 0, 0]), fetched_version=version))  # refused
shard.figures().staleness.summary()

# %% [markdown]
# ## The cost of a fetch and a push, on real shard actors
#
# `time_roundtrip` starts fresh shard actors on the cluster's workers and times, from here, a full fetch and a
# full push of a float32 vector of each size (medians).

# %%
sizes = [1_000, 100_000, 1_000_000] if small else [1_000, 10_000, 100_000, 1_000_000, 4_000_000]
costs = {s: [time_roundtrip(cluster, n, s, repeats=10 if small else 30) for n in sizes] for s in (1, 2)}
plot_lines(sizes, {f"{s} shard{'s' if s > 1 else ''}": [r.fetch_plus_push_ms for r in rows]
                   for s, rows in costs.items()},
           xlabel="parameters (float32)", ylabel="fetch + push, ms", logx=True, logy=True,
           ax_title="one fetch and one push, from the client")

# %% [markdown]
# **Reading the plot.** Below about 100,000 parameters the line is flat: a fetch plus a push costs a fixed
# ~1-3 ms of messages, whatever the size, and a second shard adds a second message. Above it the cost grows with
# the bytes. On this machine both shards share one memory bus and a loopback "network", so two shards barely
# beat one; in the paper each shard had a machine and a network link of its own, so *k* shards serve *k* times
# the bytes per second, and no single machine has to hold a model of billions of parameters.
#
# ## What that means for a replica: `n_fetch` and `n_push`
#
# Compare the wire with the arithmetic. Sync SGD in memory computes one step of this MLP without any wire;
# through two shards on the cluster, every step also fetches and pushes.

# %%
signals = data.load("signals")
net = nn.build("mlp", signals.n_features, signals.n_classes, l2=1e-4)
steps = 600 if small else 2000
with dbkit.SyncSGD(net, signals, lr=0.1, eval_every=steps) as local:
    local.fit(steps=steps)
with dbkit.SyncSGD(net, signals, lr=0.1, eval_every=steps, on_cluster=True, shards=2,
                   client=cluster.client) as remote:
    remote.fit(steps=steps)
compute_ms = 32e3 / local.report()["examples_per_second"]
step_ms = 32e3 / remote.report()["examples_per_second"]
print(f"{net.size:,} parameters: a step computes in {compute_ms:.2f} ms, through shards it takes {step_ms:.2f} ms")
for n in (1, 4, 16, 64):
    wire = (step_ms - compute_ms) / n
    print(f"n_fetch = n_push = {n:>2}: the wire is {wire / (wire + compute_ms):5.1%} of a step")

# %% [markdown]
# A small model is **communication-bound**: at `n_fetch = n_push = 1` most of a step is spent on the wire. That
# is why Downpour lets a replica fetch every `n_fetch` steps and push every `n_push` steps, computing on the
# parameters it has in between. The price is staleness, which lesson 02 measures. The paper's models had
# millions of parameters per machine and much more arithmetic per byte, so their balance sat elsewhere, but the
# trade-off is the same.
#
# The shards change the *place* of the arithmetic, not its result: the parameters after sync SGD through the
# shards are bit for bit those of sync SGD in memory.

# %%
print("bit-identical:", remote.parameters().tobytes() == local.parameters().tobytes())

# %% [markdown]
# ## Exercise
#
# How large must `n` be for the wire to be under 10% of a step of this model? And for a model of 1M parameters,
# whose step computes in about 5 ms on this machine?
#
# <details><summary>Solution</summary>
#
# The wire's share is `w / (w + c)` with `w = (step_ms - compute_ms) / n`; it is under 10% when
# `n > 9 * (step_ms - compute_ms) / compute_ms`. For 1M parameters take the wire's cost from the plot (the
# 2-shard point at 1,000,000 parameters) and a step of 5 ms:
#
# ```python
# import math
#
# this_model = math.floor(9 * (step_ms - compute_ms) / compute_ms) + 1
# wire_1m = costs[2][sizes.index(1_000_000)].fetch_plus_push_ms
# million = math.floor(9 * wire_1m / 5.0) + 1
# print(f"this model: n >= {this_model}; 1M parameters, a 5 ms step, {wire_1m:.1f} ms of wire: n >= {million}")
# ```
#
# With the wire at about 6 ms for 1M parameters, `n > 9 * 6 / 5`, so `n = 11` or more.
# </details>

# %%
moved = remote.report()["bytes"]
assert moved["pushed"] == steps * 4 * net.size, "every step pushes the whole model's gradient, once"
assert moved["fetched"] >= steps * 4 * net.size, "every step fetches the whole model"
assert remote.parameters().tobytes() == local.parameters().tobytes(), "shards must not change the arithmetic"
print("lesson held: every step moves the whole model both ways, and the shards keep SGD's arithmetic exact")
