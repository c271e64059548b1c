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
# # 5. Model partitioning: when does splitting one model over machines pay?
#
# **The question** (DistBelief Sec. 3, Fig. 3). A model too big or too slow for one machine can be split: each
# of K **partitions** holds some units and their parameters, computes their part of the forward and backward
# pass, and sends only the activations (and gradients) that cross a partition boundary. The paper's speedup rose
# with K, then flattened or fell, and models with **local connectivity** gained the most. Why?

# %%
import json
from pathlib import Path

from IPython.display import display

import dbkit
from dbkit import data, nn
from dbkit.calibration import time_partitioned_step
from dbkit.partition import describe
from dbkit.sim.figures import figure3
from dbkit.telemetry import Chart, SummaryTable, plot_lines, plot_partitions

small = data.small()
cluster = dbkit.Cluster(n_workers=2)

# %% [markdown]
# ## What crosses a boundary
#
# Two networks of about the same size for 400-point signals: a **locally connected** one (each unit sees five
# neighbouring inputs, with weights of its own) and a **fully connected** one. Split in two, each partition
# owns half of every layer's units (colours); dots mark the units whose outputs the other partition needs.

# %%
local = nn.build("signal-local", 400, 10, filters=16)
dense = nn.build("mlp", 400, 10, hidden=(512, 256))
print(f"locally connected: {local.size:,} parameters; fully connected: {dense.size:,}")
display(Chart(plot_partitions(local, 2)))
Chart(plot_partitions(dense, 2))

# %% [markdown]
# A locally connected partition needs only a few units at its edge from its neighbour; a fully connected one
# needs *every* unit of the other half. `describe` counts, per layer, the activations per example that cross
# between the two partitions:

# %%
crossing = {name: describe(net, 2) for name, net in (("locally connected", local), ("fully connected", dense))}
for name, rows in crossing.items():
    print(name)
    for row in rows:
        if sum(row["params_per_partition"]):
            print(f"  {row['kind']:<50} {row['cross_floats_per_example']:>5} floats cross per example")

# %% [markdown]
# The second locally connected layer reads 6,336 units and needs only 48 from the other side (its receptive
# fields overlap the boundary by a few positions, times 16 filters). Each dense layer needs the whole other half
# of its input. Both networks end in a dense softmax layer, and in the locally connected one that layer, which
# reads all 3,136 units, carries most of the traffic: the paper's image models shrank their layers toward the
# top for the same reason. Now measure a training step (forward and backward, batch 32) of each, in one
# partition and in two, on this machine's two worker processes.

# %%
steps = 5 if small else 20
measured = {name: [time_partitioned_step(cluster, net, k, steps=steps) for k in (1, 2)]
            for name, net in (("locally connected", local), ("fully connected", dense))}
for name, (_, two) in measured.items():  # K = 1 and K = 2 timed interleaved in one run: their own ratio
    print(f"{name:>18}: K=1 {two.k1_ms:6.1f} ms, K=2 {two.step_ms:6.1f} ms, speedup {two.speedup:4.2f}x, "
          f"{two.bytes_per_step / 1e3:8.1f} kB between partitions per step "
          f"(the connectivity needs {two.min_bytes_per_step / 1e3:.1f} kB)")

# %% [markdown]
# At this size splitting does not pay, or barely: a step is one to three milliseconds of arithmetic, and a step
# in two partitions makes about ten exchanges between them. Over the partitions' own sockets each costs tens of
# microseconds; as an actor call through Dask (`time_partitioned_step(..., transport="actor")`: try it) about ten
# times that, and K = 2 then takes twice as long as K = 1. That is the left end of the paper's Fig. 3: a model
# must give every machine enough arithmetic to hide its messages, and what a message costs decides how much.
#
# ## The same question at a larger size: shipped benchmark data
#
# `benchmarks/partition_speedup.py` times a 5.8M-parameter locally connected image model and a 9.4M-parameter
# fully connected one for K = 1, 2 and 4 on this kind of two-core machine (its table and method are in
# `docs/benchmarks.md`). Its numbers ship with the kit:

# %%
shipped = json.loads(Path("../docs/data/partition_speedup.json").read_text())
ks = sorted({row["k"] for row in shipped["local"]["rows"]})
plot_lines(ks, {f"{name} ({shipped[key]['parameters'] / 1e6:.1f}M), {how}":
                [r["speedup"] for r in shipped[key]["rows"] if r["transport"] == transport]
                for key, name in (("local", "locally connected"), ("dense", "fully connected"))
                for transport, how in (("socket", "own wire"), ("actor", "actor calls"))},
           xlabel="partitions K (machines per model replica)", ylabel="speedup over K = 1",
           ax_title="speedup of one training step against K (the paper's Fig. 3 in spirit)")

# %% [markdown]
# **Reading it.** Over the partitions' own wire both models gain from K = 2: each half's arithmetic (tens of
# milliseconds) outweighs its exchanges. With every boundary slice an actor call through Dask, the fully
# connected model gained almost nothing: every partition must receive every activation of the other, in one
# exchange per layer each way, and at a millisecond or so apiece the messages cost what the split saved. What a
# message costs decides. At K = 4 on a two-core machine the partitions share cores and the boundaries double, so
# the gain shrinks. The paper saw the same shape with more machines: 2.2x at 8 machines for its 42M-parameter
# speech model (fully connected), more than 12x at 81 machines for its 1.7B-parameter locally connected image
# model. Speedup rises while each machine's arithmetic outweighs its messages, then flattens or falls.
#
# ## At the paper's scale (simulated)
#
# Two cores stop at K = 4. `dbkit.sim` costs one step of the paper's own models split over up to 128 simulated
# machines of the `distbelief-2012` profile (16 cores, 1 Gb/s, 100 us a message, 0.5 ms a boundary message):
# the 42M-parameter fully connected speech model and the 1.7B-parameter locally connected image model, each
# partition computing its share and sending its boundary, as above. Beside them, this machine's measured points.

# %%
scale = figure3("distbelief-2012", models=("speech-42m", "image-1.7b"))
machines = scale["models"]["speech-42m"]["machines"]
nothing = float("nan")
plot_lines(machines,
           {**{f"simulated, distbelief-2012: {name} ({m['connectivity']})": m["speedup"]
               for name, m in scale["models"].items()},
            **{f"measured here: {name} ({shipped[key]['parameters'] / 1e6:.1f}M)":
               [next((r["speedup"] for r in shipped[key]["rows"] if r["k"] == k), nothing) for k in machines]
               for key, name in (("local", "locally connected"), ("dense", "fully connected"))}},
           xlabel="machines per model replica", ylabel="speedup over one machine", logx=True,
           ax_title="one step split: simulated (distbelief-2012) and measured here")

# %% [markdown]
# **Reading it.** At the paper's scale the shape is the paper's: the dense speech model peaks near 8 machines
# (the paper measured 2.2x there) and falls as its all-to-all traffic outgrows each machine's shrinking share of
# arithmetic; the locally connected 1.7B-parameter model keeps gaining to 81 machines and beyond (the paper:
# more than 12x at 81; the simulation is higher, since it splits arithmetic perfectly). This machine's two
# points per model sit at the far left of the same picture.
#
# ## Partitioned Downpour, live
#
# Partitioning and Downpour combine: each partition of a replica exchanges parameters only with the shards that
# hold its own parameters. Below, one replica of `signal-local` split in two trains on `signals`, in the
# background: it keeps running after the lesson until you press **Stop** (a move made while a cell is still
# running is applied as soon as that cell ends). Move `partitions` between 1 and 2 on the panel and watch the
# purple "between partitions" line on the MB/s plot drop to zero and come back, while examples per second
# barely move (this model is too small for the split to pay, as measured above).

# %%
job = dbkit.DownpourSGD("signal-local", "signals", client=cluster.client, replicas=1, partitions=2, shards=2,
                        optimizer="adagrad", lr=0.03, eval_every=200)
job.start()
display(job.panel())
job.wait(seconds=8 if small else 30)
partitioned = job.report()
SummaryTable({"1 replica in 2 partitions": partitioned})

# %% [markdown]
# ## Exercise
#
# Make the locally connected layers' receptive field wider: `nn.build("signal-local", 400, 10, filters=16)` uses
# kernel 5. Build a `nn.Network` of two `nn.LocallyConnected1D` layers with kernel 25 instead and measure its
# bytes between partitions at K = 2. What happens to the boundary, and to the speedup?
#
# <details><summary>Solution</summary>
#
# ```python
# c1 = nn.LocallyConnected1D(400, 1, kernel=25, filters=16)
# c2 = nn.LocallyConnected1D(c1.out_shape[0], 16, kernel=25, filters=16, stride=2)
# wide = nn.Network([c1, nn.ReLU(c1.out_size), c2, nn.ReLU(c2.out_size), nn.Dense(c2.out_size, 10)])
# step = time_partitioned_step(cluster, wide, 2, steps=steps)
# print(f"kernel 25: {step.bytes_per_step / 1e3:.1f} kB between partitions per step, "
#       f"speedup {step.speedup:.2f}x (kernel 5: {measured['locally connected'][1].bytes_per_step / 1e3:.1f} kB)")
# ```
#
# The boundary grows with the kernel (each edge unit reads 24 neighbours
# instead of 4), so more bytes cross per step; with more arithmetic per unit too, the speedup holds up until the
# boundary approaches the whole layer, which is the fully connected case.
# </details>

# %%
(l1, l2), (d1, d2) = measured["locally connected"], measured["fully connected"]
assert l2.bytes_per_step == l2.min_bytes_per_step and d2.bytes_per_step == d2.min_bytes_per_step
local_layer, dense_layer = crossing["locally connected"][2], crossing["fully connected"][2]
assert local_layer["cross_floats_per_example"] < 0.01 * 6336, "a locally connected layer needs only its boundary"
assert dense_layer["cross_floats_per_example"] == 512, "a dense layer needs every input of the other half"
b = partitioned["bytes"]
assert b["between_partitions"] == b["between_partitions_min"] > 0, "partitioned Downpour sends only the boundary"
assert partitioned["history"][-1]["test_accuracy"] > partitioned["history"][0]["test_accuracy"] + 0.2
speech, big = scale["models"]["speech-42m"], scale["models"]["image-1.7b"]
assert max(speech["speedup"]) < 3 and big["speedup"][machines.index(81)] > 12, "simulated: dense peaks, local scales"
assert speech["speedup"][machines.index(81)] < max(speech["speedup"]), "simulated: the dense model falls past its peak"
assert job.state == "running", "the panel's job runs on: steer it above, or press Stop"
print("lesson held: locality keeps the traffic between partitions small, and partitioned replicas train; "
      "at the paper's scale (simulated) the locally connected model scales where the dense one peaks")
