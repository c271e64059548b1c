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
# # 2. Downpour SGD: does asynchronous training still converge, and faster?
#
# **The question** (DistBelief Sec. 4.1, Fig. 4). In **Downpour SGD** every model replica trains on its own part
# of the data and never waits for the others: every `n_fetch` steps it fetches the parameters, every `n_push`
# steps it pushes the gradient it accumulated, and each shard applies pushes as they come. So replicas compute
# gradients on parameters that others have changed since: the gradients are **stale**. Does training still
# converge? Does it reach a given accuracy sooner than the one-replica baseline? And what do `n_fetch` and
# `n_push` trade?
#
# Every run below trains the same locally connected network (`signal-local`) on `signals`, gets the same
# wall-clock budget on the same two worker processes, and is judged by its **time to 60% test accuracy**.

# %%
import tempfile
from pathlib import Path

from IPython.display import Image, display

import dbkit
from dbkit import data
from dbkit.sim.figures import METHODS, Setup, figure4, plot_figure
from dbkit.telemetry import SummaryTable, compare_runs, plot_lines

small = data.small()
seconds = 10 if small else 40
target = 0.6
cluster = dbkit.Cluster(n_workers=2)
common = dict(client=cluster.client, shards=2, optimizer="adagrad", lr=0.03, eval_every=200, target_accuracy=target)

# %% [markdown]
# ## Sync SGD against 1, 3 and 6 replicas
#
# The baseline is sync SGD through the same two shards: one replica that fetches and pushes every step and waits
# for each. The panel shows the 6-replica run live; move `n_push` or `replicas` on it to see the curves answer.

# %%
runs = {}
with dbkit.SyncSGD("signal-local", "signals", on_cluster=True, **common) as sync:
    sync.fit(seconds=seconds, progress=False)
runs["sync SGD"] = sync.report()
for replicas in (1, 3, 6):
    job = dbkit.DownpourSGD("signal-local", "signals", replicas=replicas, **common)
    if replicas == 6:
        display(job.panel())
    job.fit(seconds=seconds, progress=False)
    job.stop()
    runs[f"Downpour, {replicas} replica{'s' if replicas > 1 else ''}"] = job.report()
compare_runs(runs, target=target, title="same budget, same two processes: test accuracy and time to 60%")

# %%
table = SummaryTable(runs)
table

# %% [markdown]
# **Reading it.** Every Downpour run converges, although most of its gradients are stale. One Downpour replica
# already beats sync SGD: it computes on a worker next to the shards, not through the client. More replicas
# reach the target sooner only as far as they add examples per second, and here they add little: at
# `n_fetch = n_push = 1` a step is mostly messages (lesson 01), and all replicas and both shards share two
# processors. In the paper each replica and each shard had machines of their own, so replicas added throughput
# until the shards saturated (its Fig. 4 and 5). The next section removes the bottleneck this machine has.
#
# ## Staleness: the price of not waiting
#
# A push's staleness is how many updates a shard applied between the pusher's fetch and its push. With *R*
# replicas pushing every step and waiting for each answer it would be about *R - 1*. A Downpour replica does not
# wait (the paper's client fetches and pushes in the background, `overlap=True`): it computes on parameters
# fetched one exchange earlier, and its own push is still on the wire, so it is about *2R - 1*. Run with
# `overlap=False` to see the blocking replica's *R - 1*.

# %%
replica_runs = [k for k in runs if k.startswith("Downpour")]
plot_lines([1, 3, 6], {"mean staleness (versions)": [table[k].staleness for k in replica_runs]},
           xlabel="replicas", ylabel="updates between fetch and push", ax_title="staleness against replicas")

# %% [markdown]
# ## At the paper's scale (simulated): 1, 20 and 200 replicas
#
# Above, six replicas on two shared cores barely beat one. In the paper each replica had machines of its own.
# `dbkit.sim` runs the same replicas and shards on simulated machines of the paper's era (profile
# `distbelief-2012`), in virtual time: one SGD replica, then 20 and 200 Downpour replicas with Adagrad, each
# from the same warm start, until the test accuracy reaches 0.4, in the paper's arrangement (16 shards,
# `n_fetch = n_push = 4`, each method at its best learning rate; docs/benchmarks.md has the sweep). **These are
# simulated seconds**, beside the real runs above.

# %%
setup = Setup.at_paper_replicas(small)
at_scale = figure4(setup, methods=(METHODS[0], METHODS[2], METHODS[4]))
reached = {m["replicas"]: m["time_to_target"] for m in at_scale["methods"].values()}
display(Image(plot_figure(at_scale, Path(tempfile.mkdtemp()) / "at_scale.png")))
real = {r: table[f"Downpour, {r} replica{'s' if r > 1 else ''}"].seconds_to_target for r in (1, 3, 6)}
print("real, this machine (seconds to 0.6):", {r: None if t is None else round(t, 1) for r, t in real.items()})
print("simulated, distbelief-2012 (simulated seconds to 0.4):", {r: round(t, 2) for r, t in reached.items()})

# %% [markdown]
# **Reading it.** With machines of their own, more replicas reach the accuracy sooner: 20 replicas with Adagrad
# get there about ten times sooner than one, and 200 sooner still (less than ten times sooner than 20: their
# pushes are staler, and the shards begin to queue; lesson 08 shows where they saturate). The paper's Fig. 4
# and 5 show the same order. On two shared cores, the real runs cannot: their replicas share the processors.
#
# %% [markdown]
# ## The n_fetch / n_push trade-off
#
# Three replicas again, fetching and pushing every 1, 4 and 16 steps. Fewer messages mean more examples per
# second; but each replica computes longer on old parameters, and its pushes carry many steps at once.

# %%
rates = {"n = 1": runs["Downpour, 3 replicas"]}
for n in (4, 16):
    with dbkit.DownpourSGD("signal-local", "signals", replicas=3, n_fetch=n, n_push=n, **common) as job:
        job.fit(seconds=seconds, progress=False)
    rates[f"n = {n}"] = job.report()
rate_table = SummaryTable(rates)
display(rate_table)
plot_lines([1, 4, 16], {"examples per second (thousands)": [rate_table[k].examples_per_second / 1e3 for k in rates],
                        "staleness in examples (thousands)": [rate_table[k].staleness_examples / 1e3 for k in rates]},
           xlabel="n_fetch = n_push", ylabel="thousands", logx=True, ax_title="throughput and staleness against n")

# %%
display(compare_runs(rates, x="step", title="progress per update: accuracy against steps"))
compare_runs(rates, target=target, title="progress per second: accuracy against seconds")

# %% [markdown]
# **Reading it.** Against steps, `n = 1` learns the most per update: its gradients are the freshest. Against
# seconds, larger `n` wins on this small model, because a step's arithmetic is tiny next to a message
# (lesson 01), so saving messages is worth more than fresh parameters. A model with more arithmetic per byte
# moves the best `n` down. The paper picked `n_fetch` and `n_push` per model for exactly this reason.
#
# ## Exercise
#
# Run three replicas with `n_fetch=1, n_push=16` and with `n_fetch=16, n_push=1`. Which matters more here,
# fetching or pushing less often?
#
# <details><summary>Solution</summary>
#
# `dbkit.DownpourSGD("signal-local", "signals", replicas=3, n_fetch=1, n_push=16, **common)` and the mirror image, each
# with `fit(seconds=seconds)`, then `SummaryTable({...})`. Both halve the messages of `n = 1` (one of the two
# kinds is rare); their examples per second are close. Pushing rarely makes every push carry up to 16 steps of
# gradient computed on parameters up to that old, which shows as larger staleness in examples.
# </details>

# %%
cluster.close()
for label in replica_runs:
    assert table[label].test_accuracy > 0.5, f"{label} should converge"
assert table["Downpour, 6 replicas"].staleness > table["Downpour, 1 replica"].staleness + 1
per_step = {k: rate_table[k].megabytes / rate_table[k].steps for k in rates}
assert per_step["n = 16"] < 0.2 * per_step["n = 1"], "fetching and pushing every 16 steps should move far fewer bytes"
assert rate_table["n = 16"].staleness_examples > rate_table["n = 1"].staleness_examples
assert all(t is not None for t in reached.values()) and reached[1] > reached[20] > reached[200], \
    f"simulated: more replicas should reach the target sooner: {reached}"
print("lesson held: replicas converge without waiting; staleness grows with replicas, traffic falls with n; "
      "at the paper's scale (simulated), 200 replicas reach the target before 20, and 20 before one")
