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
# # 7. Scaling out: the same jobs on a real cluster
#
# **The question.** Everything so far ran on a `LocalCluster` inside this machine. DistBelief's point is many
# machines. How does the same code run on a real Dask cluster, and what must the machines have?
#
# Nothing in dbkit's jobs knows where its workers are: give a job a **scheduler address** (or a Dask `Client`)
# and its shards and replicas go to that cluster's workers. This notebook is not run in CI (it needs a
# cluster), but its code is: a test starts a real `dask scheduler` and two `dask worker` processes on
# 127.0.0.1 and runs it against them.
#
# ## 1. Start a scheduler and workers
#
# On the machines (or in three terminals here):
#
# ```bash
# dask scheduler --host 0.0.0.0 --port 8786
# # on every worker machine: the settings docs/benchmarks.md measured (large gradients stay off mmap, one BLAS
# # thread per replica), then a worker with a thread per replica or shard it will hold
# export MALLOC_TRIM_THRESHOLD_=268435456 MALLOC_MMAP_THRESHOLD_=33554432 OMP_NUM_THREADS=1
# dask worker tcp://SCHEDULER:8786 --nthreads 2
# ```
#
# Every worker needs the same versions of dbkit, numpy and dask as this notebook (`pip install -e .` from this
# repository, or an image built with it): replicas and shards are dbkit classes sent to the workers.
#
# ## 2. Point a job at it

# %%
import os

import dbkit
from dbkit import data
from dbkit.telemetry import SummaryTable

address = os.environ.get("DBKIT_SCHEDULER", "tcp://127.0.0.1:8786")  # your scheduler's address
small = data.small()
job = dbkit.DownpourSGD("signal-local", "signals", scheduler=address, replicas=2, shards=2, optimizer="adagrad",
                        lr=0.03, n_fetch=4, n_push=4, eval_every=200)
job.fit(seconds=10 if small else 60)
job.stop()
report = job.report()
print("workers:", sorted({r["worker"] for r in report["replicas"]} | {s["worker"] for s in report["shards"]}))
SummaryTable({"Downpour on " + address: report})

# %% [markdown]
# ## 3. Watch it on the Dask dashboard
#
# The scheduler serves a dashboard (when `bokeh>=3.1` is installed where it runs), and on a real cluster it
# is the first instrument to read. Run a job again and open the link below beside it:
#
# - **Task Stream**: each replica is one long-running task per worker (a bar across the whole run, since its
#   loop calls `secede()`), and Sandblaster's work units are many short ones, handed to whichever worker is free.
# - **Workers** (memory, CPU): a worker holding shards holds their parameters (and Adagrad's accumulators,
#   as much again); a worker whose CPU sits near 100% is the one to add, or to move a shard off.
# - **Bandwidth** (worker to worker): large while replicas fetch and push every step; watch it fall with
#   `n_fetch = n_push = 16`.
#
# The panel links to the same page (`job.panel()`: "Dask dashboard"). A simulated cluster has no dashboard; the
# panel says so and shows the simulated shards' figures instead.

# %%
with dbkit.Cluster(scheduler=address) as watching:
    link = watching.dashboard_link()
print("the dashboard:", link or "not served (install bokeh>=3.1 where the scheduler runs)")

# %% [markdown]
# The panel works the same way (`job.panel()`), and its dashboard link points at the scheduler's dashboard
# (port 8787 unless you chose another). The command line takes the same address:
#
# ```bash
# dbkit run downpour --scheduler tcp://SCHEDULER:8786 --replicas 8 --shards 4 --seconds 600 --report run.json
# ```
#
# ## 3. On a batch system: dask-jobqueue
#
# `dask-jobqueue` starts workers as batch jobs (SLURM, PBS, SGE, LSF, HTCondor) and gives a Dask cluster object;
# hand its `Client` to a job. The worker settings go into the job script:
#
# ```python
# from dask_jobqueue import SLURMCluster
# from distributed import Client
#
# cluster = SLURMCluster(cores=2, processes=1, memory="8GB", walltime="02:00:00",
#                        job_script_prologue=["export MALLOC_TRIM_THRESHOLD_=268435456",
#                                             "export MALLOC_MMAP_THRESHOLD_=33554432",
#                                             "export OMP_NUM_THREADS=1"])
# cluster.scale(jobs=8)  # eight worker machines
# client = Client(cluster)
# client.wait_for_workers(8)
# job = dbkit.DownpourSGD("speech", "speech", client=client, replicas=6, shards=2, n_fetch=4, n_push=4)
# ```
#
# ## 4. On Kubernetes: dask-kubernetes
#
# The Dask Kubernetes operator starts a scheduler and workers as pods. The worker image must hold dbkit; the
# Dask image installs extra packages at start from `EXTRA_PIP_PACKAGES`:
#
# ```python
# from dask_kubernetes.operator import KubeCluster
# from distributed import Client
#
# cluster = KubeCluster(name="dbkit", n_workers=8, resources={"requests": {"cpu": "2", "memory": "8Gi"}},
#                       env={"EXTRA_PIP_PACKAGES": "dbkit", "OMP_NUM_THREADS": "1",
#                            "MALLOC_TRIM_THRESHOLD_": "268435456", "MALLOC_MMAP_THRESHOLD_": "33554432"})
# client = Client(cluster)
# job = dbkit.SandblasterLBFGS("mlp", "signals", client=client, replicas=6, shards=2)
# ```
#
# ## What changes on real machines, and what does not
#
# - **Same**: the algorithms, the staleness figures, the reports, the panel. A report lists the cluster's workers,
#   and the worker each shard and each replica ran on.
# - **Faster**: each replica and each shard gets its own cores and its own network link, so replicas add
#   throughput (lesson 02's curves keep rising with replicas) and shards add bandwidth (lesson 01).
# - **Slower**: a fetch or push crosses a real network, so the `n_fetch`/`n_push` trade-off (lesson 02) and the
#   partition boundaries (lesson 05) matter more. Measure first: `python benchmarks/ps_roundtrip.py` against your
#   cluster tells you what a message costs there.
# - **Not yet handled**: a parameter shard's machine dying ends the run (lesson 06).
#
# ## Exercise
#
# Run the command line version against your scheduler with `--replicas 1`, then `--replicas 4`, and compare
# `examples_per_second` in the two reports.
#
# <details><summary>Solution</summary>
#
# `dbkit run downpour --scheduler ADDRESS --replicas 1 --seconds 60 --report one.json`, the same with
# `--replicas 4 --report four.json`, then `json.load` both. In Python, the same two runs:
#
# ```python
# rates = {}
# for replicas in (1, 4):
#     with dbkit.DownpourSGD("mlp", "signals", scheduler=address, replicas=replicas, shards=2,
#                            optimizer="adagrad", lr=0.05) as run:
#         run.fit(seconds=5 if small else 60)
#     rates[replicas] = run.report()["examples_per_second"]
# print({r: round(v) for r, v in rates.items()})
# ```
#
# With a worker per replica, four replicas should come close to four times the examples per second, until the
# shards' workers saturate; adding shards (`--shards`) moves that limit.
# </details>

# %%
assert report["state"] == "stopped" and report["history"][-1]["test_accuracy"] > 0.4
assert all(r["worker"] for r in report["replicas"]), "every replica should have run on a worker of the cluster"
print("lesson held: the same job ran on the cluster at", address)
