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
# # 6. Failures: what happens when a machine dies mid-training?
#
# **The question** (DistBelief Sec. 4.1). With thousands of machines, one is always failing. In synchronous
# SGD every step waits for every machine, so one failure stops training. The paper argues Downpour is robust:
# "if one machine in a model replica fails, other model replicas continue processing their training data and
# updating the model parameters via the parameter servers". Does it hold?
#
# Below, four replicas train; then one is lost, as if its machine died: its task ends, and the gradient it had
# accumulated but not pushed is gone with it. On the panel, the **lose a replica** button does exactly this:
# press it while the job runs (the second cell presses it for you). The job runs in the background and keeps
# running after the lesson, until you press **Stop**.

# %%
import tempfile

from IPython.display import display

import dbkit
from dbkit import data
from dbkit.runtime import InProcessCluster
from dbkit.telemetry import Checkpointed, ReplicaEvent, ShardLost, compare_runs

small = data.small()
seconds = 6 if small else 20
cluster = dbkit.Cluster(n_workers=2)
job = dbkit.DownpourSGD("signal-local", "signals", client=cluster.client, replicas=4, shards=2,
                        optimizer="adagrad", lr=0.03, n_fetch=4, n_push=4, eval_every=200)
job.start()
panel = job.panel()
display(panel)
job.wait(seconds=seconds)
steps_before = {r.replica: r.steps for r in job.replicas()}
accuracy_before = job.history[-1]["test_accuracy"]

# %%
panel.buttons["lose a replica"].click()  # what the button does: job.lose_replica()
panel.wait_idle(30)
job.wait(seconds=seconds)
lost = [e for e in job.events.of(ReplicaEvent) if e.what == "lost"]
print(f"lost: replica {lost[0].replica} on {lost[0].worker} ({lost[0].reason})")
for r in job.replicas():
    print(f"replica {r.replica}: {r.state:>8}, {r.steps:,} steps ({r.steps - steps_before.get(r.replica, 0):,} "
          f"after the loss)")
report = job.report()
compare_runs({"4 replicas, one lost mid-run": report}, title="training goes on after a replica is lost")

# %% [markdown]
# **Reading it.** The dashed line marks the loss. The other three replicas never noticed: they fetch from and
# push to the shards, never to each other, so nothing waited for the dead one. Examples per second drop by about
# a quarter and training continues. What was lost is small: the steps the replica had accumulated since its
# last push (at most `n_push` steps of gradient).
#
# The paper makes the same point for Sandblaster: a replica that dies mid-batch only loses its running work
# units, which the coordinator hands to others (lesson 04's mechanism; `tests/test_sandblaster.py` kills one
# mid-batch).
#
# ## A whole machine lost: its shard comes back from a checkpoint
#
# A replica is easy to lose: the others train on. A **parameter shard** is not: it holds the only copy of its
# slice of the model. DistBelief's parameter servers saved their state now and then; dbkit's shards do the same
# when the job has a checkpoint folder (`checkpoint_dir`). When a machine dies, the job starts each of its shards
# again from the last checkpoint on a live machine, starts a replacement for each replica it held (on the same
# data), and trains on; what is lost is the updates since that checkpoint, which the job counts.
#
# Below, three machines of this process (`InProcessCluster`: workers placed and called as on Dask, in one
# process, so that one can be lost at a known moment) hold two shards and two replicas; the machine with
# shard 0 and a replica dies mid-run.

# %%
checkpoints = tempfile.mkdtemp()
with InProcessCluster(workers=3) as machines:
    w = machines.workers()
    with dbkit.DownpourSGD("signal-local", "signals", cluster=machines, replicas=2, shards=2, optimizer="adagrad",
                           lr=0.03, checkpoint_dir=checkpoints, checkpoint_every=0.5, eval_every=200,
                           shard_workers=[w[0], w[1]], replica_workers=[w[0], w[2]]) as recovered:
        recovered.fit(seconds=seconds)
        machines.lose_worker(w[0])  # the machine with shard 0 and replica 0
        recovered.fit(seconds=seconds)
        restored = recovered.report()
(shard_lost,) = recovered.events.of(ShardLost)
print(f"shard {shard_lost.shard} lost with {shard_lost.worker}; restored on {shard_lost.restored_on} from the "
      f"checkpoint at version {shard_lost.checkpoint_version} ({shard_lost.updates_lost} updates lost) in "
      f"{shard_lost.seconds:.2f} s; {len(recovered.events.of(Checkpointed))} checkpoints were saved")
print("replicas:", [(e.replica, e.what) for e in recovered.events.of(ReplicaEvent) if e.what in ("lost", "restarted")])
compare_runs({"shard 0's machine lost, restored from its checkpoint": restored},
             title="a lost parameter shard comes back from its checkpoint")

# %% [markdown]
# **Reading it.** The shard came back on another machine from its last checkpoint, a replacement replica took
# over the lost replica's data, and accuracy went on from about where it was: the updates since the checkpoint
# are the whole loss. Without a checkpoint folder, a lost shard ends the run cleanly with a report
# (`docs/reliability.md` measures every such fault). On a real cluster the same happens when a worker process
# or its machine dies.
#
# ## Exercise
#
# Lose replicas until one is left (press the button three times). What does the job refuse, and why?
#
# <details><summary>Solution</summary>
#
# ```python
# for press in range(3):
#     panel.buttons["lose a replica"].click()
#     panel.wait_idle(30)
#     print(f"press {press + 1}: {panel.note}")
# job.set(replicas=4)
# print(job.snapshot().live_replicas, "replicas live again")
# ```
#
# Of the three replicas left after the lesson, two can be lost; the third press is refused with a message in
# the panel's status line: `lose_replica` keeps one live replica, so that training goes on. `job.set(replicas=4)`
# (or the `replicas` slider) starts new replicas again, which fetch the current parameters from the shards and
# join in.
# </details>

# %%
live = [r for r in job.replicas() if r.state != "lost"]
assert len(lost) == 1 and len(live) == 3, "exactly one replica should be lost"
assert all(r.steps > steps_before[r.replica] for r in live), "the other replicas should train on"
assert report["history"][-1]["test_accuracy"] >= accuracy_before - 0.05, "training should not fall back"
assert restored["faults"]["shards_lost"] == restored["faults"]["shards_restored"] == 1, "the shard came back"
assert restored["history"][-1]["test_accuracy"] > restored["history"][0]["test_accuracy"] + 0.1
assert job.state == "running", "the panel's job runs on: steer it above, or press Stop"
print("lesson held: losing a replica does not stop Downpour, and a lost shard comes back from its checkpoint")
