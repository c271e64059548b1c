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
# # 2. Downpour SGD: many replicas, one sharded parameter server
#
# DistBelief Sec. 4.1. Each **model replica** trains on its own shard of the data. Every `n_fetch` steps it
# **fetches** fresh parameters from the **parameter shards**; every `n_push` steps it **pushes** the gradient it
# accumulated. Shards apply pushes as they arrive (here with **Adagrad**, whose accumulators live on the shards).
# Nobody waits for anybody: a push computed from parameters that others have since updated is **stale**.
#
# This notebook runs it for real: shards are Dask actors, replicas are long-running Dask tasks on a
# LocalCluster's worker processes. `DBKIT_SMALL=1` keeps it quick.

# %%
import dbkit
from dbkit import data
from dbkit.telemetry import Change, Sample

small = data.small()
job = dbkit.DownpourSGD("mlp", "digits", replicas=3, shards=2, n_fetch=1, n_push=1,
                        optimizer="adagrad", lr=0.05, eval_every=100)
job.start()
job

# %% [markdown]
# ## The control panel
#
# `job.panel()` binds sliders and buttons to this job and plots that refresh about twice a second, also while
# another cell is busy: loss and test accuracy against seconds and against steps, examples per second (total
# and per replica), the staleness of the last pushes, and bytes per second. Move `replicas`, `n_push` or the
# learning rate while it trains and watch the curves answer; every change is marked with a dashed line. The
# Dask dashboard link shows the workers and the task stream. Every `set()` below shows on the panel too.

# %%
job.panel()

# %% [markdown]
# `start()` returns at once and the replicas train in the background. `fit` trains for a number of steps (over
# all replicas together) or seconds, then pauses them. A monitor thread samples the replicas' figures into the
# job's `events` while they run; `history` is read off those samples.

# %%
job.fit(steps=600 if small else 3000, progress=False)
job.history[-1]

# %% [markdown]
# ## Staleness: the price and the point of asynchrony
#
# Each shard counts, for every push, how many updates it applied since the pushing replica fetched
# (**staleness**, in versions), and how many examples' gradients it applied since (**age**, in examples).

# %%
for s in job.shards():
    print(f"shard {s.index} on {s.worker}: {s.updates} updates, staleness {s.staleness.summary()}")
for r in job.replicas():
    print(f"replica {r.replica}: {r.steps} steps, {r.pushes} pushes, {r.fetches} fetches on {r.worker}")

# %% [markdown]
# ## Change the rates while it trains
#
# Fetching and pushing less often saves communication (the paper's `n_fetch`, `n_push`) at the cost of
# staler parameters. `set` is queued, applied in order, and returns once the running replicas have taken it.
# Bad values are refused and change nothing. Every sample in the event stream carries the staleness of the
# pushes made since the previous sample: watch the age in examples jump.

# %%
def mean_age(samples):
    ages = [(v, c) for s in samples for v, c in zip(s.staleness_examples.values, s.staleness_examples.counts)]
    return sum(v * c for v, c in ages) / max(1, sum(c for _, c in ages))


before = job.events.last(Sample).seq
job.set(n_fetch=4, n_push=4)
job.fit(steps=400 if small else 2000, progress=False)
samples = job.events.of(Sample)
print("mean age of a push, n_push=1:", round(mean_age([s for s in samples if s.seq <= before])), "examples;",
      "n_push=4:", round(mean_age([s for s in samples if s.seq > before])), "examples")
try:
    job.set(n_push=0)
except ValueError as e:
    print("refused:", e)
[(c.setting, c.old, c.new) for c in job.events.of(Change)]

# %% [markdown]
# ## Add and remove replicas while it runs

# %%
job.add_replicas(1)
job.fit(steps=300 if small else 1500, progress=False)
job.remove_replicas(2)
job.fit(steps=200 if small else 1000, progress=False)
{r.replica: r.state for r in job.replicas()}

# %%
job.stop()
report = job.report()
print("test accuracy", round(report["final"]["test_accuracy"], 4), "examples/s", round(report["examples_per_second"]))
from IPython.display import Image

from dbkit.telemetry import plot_history

Image(filename=str(plot_history(report["history"], "plots/downpour.png", "Downpour SGD + Adagrad on digits")))

# %% [markdown]
# Things to try: `warm_start_steps=200` (one replica first, then the others), `optimizer="sgd", lr=1.0` with six
# replicas (it diverges: the job ends as `diverged` and its events say why), and `n_push=16` on the `speech`
# preset (`dbkit.DownpourSGD("speech", "speech", ...)`) where computation, not communication, dominates.
