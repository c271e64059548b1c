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
# # 3. Sandblaster L-BFGS: a coordinator, history on the shards, work units
#
# DistBelief Sec. 4.2. Batch methods like L-BFGS need the gradient of the *whole* training set at every step.
# Sandblaster spreads that work: a **coordinator** runs L-BFGS but holds no vectors; the parameters, the
# gradient, the search direction and the L-BFGS **history** (s, y pairs) all live on the **parameter shards**,
# which answer commands (dot, axpy, scale, copy) with scalars. Each batch gradient is cut into many small
# **work units** that replicas take as they become free, so a slow machine holds nobody up; near the end of
# a batch, running units get **backup copies** and the first finisher wins.

# %%
import numpy as np
import scipy.optimize

import dbkit
from dbkit import data, nn
from dbkit.telemetry import BatchDone

digits = data.load("digits")
net = nn.build("linear", digits.n_features, digits.n_classes, l2=1e-2)  # strictly convex

# %% [markdown]
# ## Against scipy's L-BFGS-B on the same objective

# %%
with dbkit.SandblasterLBFGS(net, digits, replicas=3, shards=2, work_unit_size=300, iterations=100) as sb:
    sb.fit(progress=False)
ours = sb.report()
X = digits.X_train.astype(np.float64)
ref = scipy.optimize.minimize(lambda p: net.loss_and_grad(p, X, digits.y_train),
                              net.init_params(0).astype(np.float64), jac=True, method="L-BFGS-B")
print("Sandblaster:", ours["final"]["full_batch_loss"], "after", ours["sandblaster"]["iterations"], "iterations",
      f"({ours['sandblaster']['stop_reason']})")
print("scipy:      ", ref.fun, "after", ref.nit, "iterations")
{k: v for k, v in ours["sandblaster"].items() if k != "rows"}

# %% [markdown]
# ## A slow replica: load balancing and backup copies
#
# Replica 0 is made ten times slower. With units handed out as replicas free up, it simply does fewer of them;
# backup copies stop the batch from waiting for its last unit. Without balancing (an equal split up front),
# every batch waits for the slow replica. Each job is paused (L-BFGS waits between iterations) and computes
# three batch gradients; every batch leaves a `BatchDone` event with its time line of work units.

# %%
rows = []
for label, opts in [("balanced + backups", dict(balance=True, backup=True)),
                    ("static equal split", dict(balance=False, backup=False))]:
    with dbkit.SandblasterLBFGS(net, digits, replicas=3, shards=2, work_unit_size=40, slow_replicas={0: 10},
                                **opts) as sb:
        sb.start()
        sb.pause()
        first = len(sb.events.of(BatchDone))
        for _ in range(3):
            sb.batch_gradient()
        seconds = [e.seconds for e in sb.events.of(BatchDone)[first:]]
        d = sb.dispatcher
        rows.append((label, round(float(np.median(seconds)), 3), dict(d.units_done), d.backups_issued,
                     d.backups_won))
for row in rows:
    label, seconds, units, issued, won = row
    print(f"{label:<20} batch {seconds:.3f} s  units per replica {units}  backups issued {issued}, won {won}")
