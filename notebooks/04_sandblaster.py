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
# # 4. Sandblaster L-BFGS: a batch method on many machines, without waiting for the slowest
#
# **The question** (DistBelief Sec. 4.2). Batch methods such as L-BFGS need the gradient of the *whole*
# training set at every step. Spread over many machines, a batch is only as fast as its slowest machine. How does
# Sandblaster keep the shards doing the vector work, keep every replica busy, and stop a straggler from holding
# up every batch? And how does it compare with Downpour?
#
# A **coordinator** runs L-BFGS but holds no vectors: the parameters, the gradient, the search direction and the
# L-BFGS **history** (s, y pairs) live on the **parameter shards**, which answer commands (dot, axpy, scale) with
# scalars. A batch is cut into many small **work units** that replicas take as they become free; near the end
# of a batch, running units get **backup copies** and the first to finish wins.

# %%
import numpy as np
import scipy.optimize
from IPython.display import display

import dbkit
from dbkit import data, nn
from dbkit.telemetry import BatchDone, SummaryTable, compare_runs, plot_timelines

small = data.small()
cluster = dbkit.Cluster(n_workers=2, threads_per_worker=2)  # a replica and a shard per worker thread
signals = data.load("signals")
linear = nn.build("linear", signals.n_features, signals.n_classes, l2=1e-2)  # softmax regression: convex

# %% [markdown]
# ## Is it still L-BFGS? Against scipy on the same objective
#
# Softmax regression with an L2 term has one minimum, so any correct L-BFGS must find the same loss.

# %%
with dbkit.SandblasterLBFGS(linear, signals, client=cluster.client, replicas=2, shards=2, iterations=100,
                            work_unit_size=1000) as sb:
    sb.fit()
ours = sb.report()
X = signals.X_train.astype(np.float64)
reference = scipy.optimize.minimize(lambda p: linear.loss_and_grad(p, X, signals.y_train),
                                    linear.init_params(0).astype(np.float64), jac=True, method="L-BFGS-B")
print(f"Sandblaster: loss {ours['final']['full_batch_loss']:.6f} after {ours['sandblaster']['iterations']} "
      f"iterations ({ours['sandblaster']['stop_reason']})")
print(f"scipy:       loss {reference.fun:.6f} after {reference.nit} iterations")

# %% [markdown]
# ## A straggler: a static split, load balancing, and backup tasks
#
# Replica 0 is made four times slower at its arithmetic (each unit's compute, counted as at least 10 ms, takes four
# times as long). Handing a unit out and collecting its result costs every replica the same, a few to tens of
# milliseconds on two cores, so here the straggler finishes a unit in about two to three times a fast replica's
# time. Three ways to share a batch among three replicas:
# a **static split** (each replica gets a third up front), **load balancing** (small units handed out as
# replicas become free) and balancing **with backup tasks**. Each job computes three batch gradients; every
# batch leaves a `BatchDone` event with its timeline of work units.

# %%
batches, figures = {}, {}
for label, options in [("static split", dict(balance=False, backup=False)),
                       ("load balancing", dict(balance=True, backup=False)),
                       ("balancing + backups", dict(balance=True, backup=True))]:
    with dbkit.SandblasterLBFGS(linear, signals, client=cluster.client, replicas=3, shards=2, work_unit_size=100,
                                slow_replicas={0: 4}, **options) as sb:
        sb.start()
        sb.pause()  # L-BFGS waits between iterations; batch_gradient() computes one batch on demand
        first = len(sb.events.of(BatchDone))
        for _ in range(3):
            sb.batch_gradient()
        done = sb.events.of(BatchDone)[first:]
        batches[label] = done[-1]
        figures[label] = (float(np.median([b.seconds for b in done])), sb.report()["sandblaster"],
                          len(sb.events.of(BatchDone)))
    print(f"{label}: {len(done)} batches computed")
for label, (seconds, sbr, _) in figures.items():
    print(f"{label:<20} batch {seconds:.2f} s, units per replica {sbr['units_per_replica']}, "
          f"backups {sbr['backups_issued']} issued, {sbr['backups_won']} won")
won, issued = (figures["balancing + backups"][1][k] for k in ("backups_won", "backups_issued"))
if won:
    print(f"backups: {won} of {issued} copies finished before the unit they copied, so those units' results came "
          "from a fast replica instead of the straggler")
else:
    print(f"backups: none of {issued} copies finished first here: a copy starts only near the end of a batch, "
          "when the straggler is already on its last unit, and on two shared cores a copy's hand-out and "
          "collection cost about as much as the rest of that unit")
plot_timelines(batches, title="one batch each, replica 0 four times slower")

# %% [markdown]
# **Reading it.** Under a static split every replica gets the same share, so the batch lasts as long as the slow
# replica takes for its third: the fast ones sit idle for most of it. With small units handed out on demand, the
# slow replica simply does fewer, and the batch ends when the work does. Backup copies trim the last unit's
# wait: near the end a free replica runs a copy of a unit still running elsewhere, and whichever finishes first
# counts. The paper (Sec. 4.2) used both, since on thousands of machines some are always slow.
#
# ## L-BFGS against Downpour, in time to accuracy
#
# The paper's Fig. 4 compares the two on its speech model: Sandblaster L-BFGS trains well, and Downpour with
# Adagrad gets there sooner on the same machines. Here: the locally connected network of lesson 02, the same
# two worker processes, the same wall-clock time.

# %%
local = nn.build("signal-local", signals.n_features, signals.n_classes, l2=1e-4)
target = 0.6
with dbkit.SandblasterLBFGS(local, signals, client=cluster.client, replicas=2, shards=2, eval_every=1,
                            iterations=30 if small else 150, target_accuracy=target) as sb:
    sb.fit()
lbfgs = sb.report()
with dbkit.DownpourSGD(local, signals, client=cluster.client, replicas=2, shards=2, optimizer="adagrad", lr=0.03,
                       n_fetch=4, n_push=4, eval_every=200, target_accuracy=target) as dp:
    dp.fit(seconds=lbfgs["train_seconds"])
runs = {"Sandblaster L-BFGS": lbfgs, "Downpour + Adagrad": dp.report()}
display(SummaryTable(runs))
compare_runs(runs, target=target, title="the same network, machines and time")

# %% [markdown]
# **Reading it.** Each L-BFGS iteration needs a full-batch gradient (and a line search may need more), so its
# first accuracy points come late; each one is a large, well-chosen step. Downpour takes thousands of small,
# noisy, stale steps in the same time and usually gets to a given accuracy first. Sandblaster's strength is
# elsewhere: it uses large batches efficiently and its result does not depend on a learning rate.
#
# ## Exercise
#
# Make the straggler worse (`slow_replicas={0: 10}`) and cut the batch into fewer, larger units
# (`work_unit_size=1000`). What happens to load balancing, and why does the paper want units "far smaller than
# 1/replicas of a batch"?
#
# <details><summary>Solution</summary>
#
# ```python
# coarse = {}
# for unit in (100, 1000):
#     with dbkit.SandblasterLBFGS(linear, signals, client=cluster.client, replicas=3, shards=2, work_unit_size=unit,
#                                 slow_replicas={0: 10}, balance=True, backup=False) as sb:
#         sb.start()
#         sb.pause()
#         for _ in range(2):
#             sb.batch_gradient()
#         coarse[unit] = sb.events.of(BatchDone)[-1].seconds
# print({f"units of {u}": f"{s:.2f} s a batch" for u, s in coarse.items()})
# ```
#
# With four units of 1,000 examples for three replicas, balancing has nothing to balance: the slow replica takes
# a unit and the batch waits for it, as under a static split. Small units let the fast replicas absorb the slow
# one's share; backup copies then cover the very last unit.
# </details>

# %%
assert abs(ours["final"]["full_batch_loss"] - reference.fun) <= 1e-3 * reference.fun, "L-BFGS should match scipy"
static, balanced = (list(figures[k][1]["units_per_replica"].values()) for k in ("static split", "load balancing"))
assert max(static) - min(static) <= figures["static split"][2], "a static split gives each replica a third of a batch"
assert balanced[0] < 0.75 * min(balanced[1:]), "with balancing the slow replica should do fewer units"
assert issued > 0 and 0 <= won <= issued, "near the end of each batch, backups are issued (and some may win)"
assert max(h["test_accuracy"] for h in lbfgs["history"]) > 0.5, "L-BFGS should train the network"
print("lesson held: Sandblaster is L-BFGS, and small work units keep a straggler from holding up the batch")
