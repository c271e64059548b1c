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
# # 0. A tour: DistBelief in one minute
#
# **The question.** Dean et al. (NIPS 2012) trained one neural network with thousands of cores at once. How can
# many machines work on *one* model without waiting for each other?
#
# The cell below starts the paper's answer, **Downpour SGD**, on a small Dask cluster on this machine: two model
# replicas train on their own halves of the data and talk only to a **parameter server** split into two shards.
# Run it and the control panel appears; its curves start moving within seconds.

# %%
import dbkit
from dbkit import data

small = data.small()  # DBKIT_SMALL=1 (Binder and CI): quick sizes
job = dbkit.DownpourSGD("mlp", "signals", replicas=2, shards=2, optimizer="adagrad", lr=0.1,
                        eval_every=200, target_accuracy=0.55)
job.start()
job.panel()

# %% [markdown]
# **What you are looking at.** Top left, the loss falls as seconds pass; top middle, test accuracy climbs toward
# the dotted line at 55% (the target whose *time to reach* the paper uses to compare methods, its Fig. 4 and 5).
# Bottom: examples per second (total, over the last few seconds), the **staleness** of the pushes (how many
# updates landed on a shard between a replica's fetch and its push), and megabytes per second on the wire.
#
# The problem is `signals`: 1-D signals of ten classes, shifted, scaled and noisy, after MNIST-1D
# (Greydanus, 2020). A plain MLP tops out around 60-70%, so changes show up on the curve instead of landing on a
# flat line.
#
# **Try it now.** The job runs in the background: the next cell only watches it for a while (a progress bar),
# and it keeps running after the lesson ends, until you press **Stop**. Type 4 into `replicas` (or set `n_push`
# to 8) on the panel, now or any time later (a move made while a cell is still running is applied as soon as
# that cell ends): a dashed line marks the change, the status line says "applied", and the replicas' count and
# the staleness answer.

# %%
job.wait(seconds=10 if small else 40)
print(job)
job.history[-1]

# %% [markdown]
# ## What the kit covers, and the order to read it
#
# | notebook | the paper's question |
# |---|---|
# | `01_parameter_server` | Why split the parameters over shards, and what does a fetch or a push cost? (Sec. 4.1) |
# | `02_downpour` | Does asynchronous SGD still converge, and faster, with more replicas? (Sec. 4.1, Fig. 4) |
# | `03_adagrad_and_warm_start` | Why did the paper need Adagrad and a warm start to make Downpour stable? (Sec. 4.1) |
# | `04_sandblaster` | How does batch L-BFGS use many machines without waiting for the slowest? (Sec. 4.2) |
# | `05_partitioning` | When does splitting *one* model over machines pay? (Sec. 3, Fig. 3) |
# | `06_failures` | What happens when a machine dies mid-training? (Sec. 4.1) |
# | `07_scaling_out` | The same jobs on a real cluster, and the Dask dashboard. |
# | `08_at_scale` | The paper's Figs. 3-5 on hundreds of simulated machines; where the shards saturate (Sec. 5) |
# | `09_after_distbelief` | What the methods after Downpour (SSP, EASGD, backup workers, DiLoCo) buy, and cost. |
#
# Every lesson opens with one question, runs the experiment, answers it with a plot, and ends with a cell that
# checks the lesson held. A lesson's panel keeps its job running after **Run All**, so you can steer it once
# the lesson has run. This machine is not Google's: the paper's shards and replicas each had machines of
# their own; here they share a few cores, so absolute speeds are small and ratios are what to read.

# %% [markdown]
# ## Exercise
#
# Stop the job, then start a new run with four replicas: press **Stop**, type 4 into `replicas`, press
# **Start** (or run the code below). Does it reach 55% sooner?
#
# <details><summary>Solution</summary>
#
# ```python
# job.stop()
# job = job.new_run(replicas=4)
# job.start()
# display(job.panel())
# job.wait(seconds=10 if small else 40)
# print(job, job.report()["time_to_accuracy"])
# ```
#
# On two cores, four replicas share the same two processors as two did, so examples per second grows little;
# time to 55% changes little or gets worse as staleness grows. With real machines per replica (the paper's
# setting) it shrinks. Lesson 02 measures exactly this.
# </details>

# %%
report = job.report()  # the job runs on: the panel above still steers it
first, last = report["history"][0], report["history"][-1]
assert last["test_accuracy"] > first["test_accuracy"] + 0.2, "the tour's run should learn"
assert job.state == "running" and len(report["history"]) >= 3, "the panel's job runs on after the lesson"
print(f"lesson held: test accuracy {first['test_accuracy']:.2f} -> {last['test_accuracy']:.2f}; "
      "the job is still running: steer it on the panel, or press Stop")
