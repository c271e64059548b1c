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
seconds = 8 if small else 40
target = 0.6
cluster = dbkit.Cluster(n_workers=2)
common = dict(client=cluster.client, shards=2, optimizer="adagrad", lr=0.03, eval_every=200, target_accuracy=target)

# %% [markdown]
# ## Sync SGD against 1, 3 and 6 replicas
#
# The baseline is sync SGD through the same two shards: one replica that fetches and pushes every step and waits
# for each. Each run shows a progress bar; the panel to steer comes at the end of the lesson, once these
# measurements are done (a job running beside them would share their two cores).

# %%
runs = {}
with dbkit.SyncSGD("signal-local", "signals", on_cluster=True, **common) as sync:
    sync.fit(seconds=seconds)
runs["sync SGD"] = sync.report()
for replicas in (1, 3, 6):
    with dbkit.DownpourSGD("signal-local", "signals", replicas=replicas, **common) as run:
        run.fit(seconds=seconds)
    runs[f"Downpour, {replicas} replica{'s' if replicas > 1 else ''}"] = run.report()
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
plot_lines([1, 3, 6], {"mean staleness (versions)": [table[k].staleness for k in replica_runs],
                       "2R - 1": [2 * r - 1 for r in (1, 3, 6)]},
           xlabel="replicas", ylabel="updates between fetch and push", ax_title="staleness against replicas")

# %% [markdown]
# ## At the paper's scale (simulated): 1, 20 and 200 replicas
#
# Above, six replicas on two shared cores barely beat one. In the paper each replica had machines of its own.
# `dbkit.sim` runs the same replicas and shards on simulated machines of the paper's era (profile
# `distbelief-2012`), in virtual time: one SGD replica, then 20 and 200 Downpour replicas with Adagrad, each
# from the same warm start, until the test accuracy reaches 0.4, in the paper's arrangement (16 shards,
# `n_fetch = n_push = 4`, each method at its best learning rate; docs/benchmarks.md has the sweep). **These are
# simulated seconds**, of another model (`mlp`) to another target (0.4), so compare the order of the
# replica counts, not the seconds, with the real runs above.

# %%
setup = Setup.at_paper_replicas(small)
at_scale = figure4(setup, methods=(METHODS[0], METHODS[2], METHODS[4]), progress=print)
reached = {m["replicas"]: m["time_to_target"] for m in at_scale["methods"].values()}
display(Image(plot_figure(at_scale, Path(tempfile.mkdtemp()) / "at_scale.png")))
real = {r: table[f"Downpour, {r} replica{'s' if r > 1 else ''}"].seconds_to_target for r in (1, 3, 6)}
print(f"real, this machine: signal-local, seconds to {target}, by replicas:",
      {r: None if t is None else round(t, 1) for r, t in real.items()})
print(f"simulated, profile {at_scale['profile']}: {at_scale['model']} from a warm start, simulated seconds to "
      f"{setup.target}, by replicas:", {r: round(t, 2) for r, t in reached.items()})
print(f"simulated: 20 replicas {reached[1] / reached[20]:.1f}x sooner than one; 200 replicas "
      f"{reached[20] / reached[200]:.1f}x sooner than 20")

# %% [markdown]
# **Reading it.** With machines of their own, more replicas reach the accuracy sooner (the last line gives by
# how much; the closing cell checks the order): 20 replicas with Adagrad get there several times sooner than
# one, and 200 sooner still, but by a smaller factor than the tenfold replicas: their pushes are staler, and
# the shards begin to queue (lesson 08 shows where they saturate). The paper's Fig. 4
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
    with dbkit.DownpourSGD("signal-local", "signals", replicas=3, n_fetch=n, n_push=n, **common) as run:
        run.fit(seconds=seconds)
    rates[f"n = {n}"] = run.report()
rate_table = SummaryTable(rates)
display(rate_table)
display(plot_lines([1, 4, 16], {"examples per second": [rate_table[k].examples_per_second for k in rates]},
                   xlabel="n_fetch = n_push", ylabel="examples per second", logx=True,
                   ax_title="throughput against n"))
plot_lines([1, 4, 16], {"in examples": [rate_table[k].staleness_examples for k in rates],
                        "in versions (x 100)": [100 * rate_table[k].staleness for k in rates]},
           xlabel="n_fetch = n_push", ylabel="mean staleness of a push", logx=True,
           ax_title="staleness against n: fewer versions, more examples")

# %%
display(compare_runs(rates, x="step", title="progress per update: accuracy against steps"))
compare_runs(rates, target=target, title="progress per second: accuracy against seconds")

# %% [markdown]
# **Staleness, counted two ways.** In versions, staleness *falls* as `n` grows: a version is one push, and
# with `n = 16` there are sixteen times fewer of them. In examples (what a gradient's parameters missed) it
# *grows*: each push carries up to 16 steps computed on parameters fetched up to 16 steps before.
#
# **Reading it.** Against steps, `n = 1` learns the most per update: its gradients are the freshest. Against
# seconds, larger `n` wins on this small model, because a step's arithmetic is tiny next to a message
# (lesson 01), so saving messages is worth more than fresh parameters. A model with more arithmetic per byte
# moves the best `n` down. The paper picked `n_fetch` and `n_push` per model for exactly this reason.

# %% [markdown]
# ## Steer it yourself
#
# The measurements are done; now a job to drive. It starts six replicas in the background and keeps running
# after the lesson, until you press **Stop** (a move made while a cell is still running is applied as soon as
# that cell ends). Set `n_push` and `n_fetch` to 16 and watch the MB per second fall and the mean staleness in
# the inset change; set `replicas` to 1 and watch the total examples per second drop while the per-replica line rises.

# %%
live = dbkit.DownpourSGD("signal-local", "signals", replicas=6, **common)
live.start()
display(live.panel())
live.wait(seconds=seconds)

# %% [markdown]
# ## Exercise
#
# Run three replicas with `n_fetch=1, n_push=16` and with `n_fetch=16, n_push=1`. Which matters more here,
# fetching or pushing less often?
#
# <details><summary>Solution</summary>
#
# ```python
# mixed = {}
# for n_fetch, n_push in ((1, 16), (16, 1)):
#     with dbkit.DownpourSGD("signal-local", "signals", replicas=3, n_fetch=n_fetch, n_push=n_push,
#                            **common) as run:
#         run.fit(seconds=seconds)
#     mixed[f"n_fetch={n_fetch}, n_push={n_push}"] = run.report()
# display(SummaryTable(mixed))
# ```
#
# Both halve the messages of `n = 1` (one of the two kinds is rare); their examples per second are close.
# Pushing rarely makes every push carry up to 16 steps of gradient computed on parameters up to that old, which
# shows as larger staleness in examples.
# </details>

# %%
for label in replica_runs:
    assert table[label].test_accuracy > 0.5, f"{label} should converge"
assert table["Downpour, 6 replicas"].staleness > table["Downpour, 1 replica"].staleness + 1
per_step = {k: rate_table[k].megabytes / rate_table[k].steps for k in rates}
assert per_step["n = 16"] < 0.2 * per_step["n = 1"], "fetching and pushing every 16 steps should move far fewer bytes"
assert rate_table["n = 16"].staleness_examples > rate_table["n = 1"].staleness_examples
assert all(t is not None for t in reached.values()) and reached[1] > reached[20] > reached[200], \
    f"simulated: more replicas should reach the target sooner: {reached}"
assert reached[20] / reached[200] < 10, "200 replicas gain less than tenfold over 20 (staleness, queues)"
assert live.state == "running", "the panel's job runs on: steer it above, or press Stop"
print("lesson held: replicas converge without waiting; staleness grows with replicas, traffic falls with n; "
      "at the paper's scale (simulated), 200 replicas reach the target before 20, and 20 before one")
