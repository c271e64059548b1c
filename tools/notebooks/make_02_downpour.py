import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
md("""# 2. Downpour SGD: many replicas, one sharded parameter server

DistBelief Sec. 4.1. Each **model replica** trains on its own shard of the data. Every `n_fetch` steps it
**fetches** fresh parameters from the **parameter shards**; every `n_push` steps it **pushes** the gradient it
accumulated. Shards apply pushes as they arrive (here with **Adagrad**, whose accumulators live on the shards).
Nobody waits for anybody: a push computed from parameters that others have since updated is **stale**.

This notebook runs it for real: shards are Dask actors, replicas are long-running Dask tasks on a
LocalCluster's worker processes. `DBKIT_SMALL=1` keeps it quick."""),
code("""import dbkit
from dbkit import data
from dbkit.cluster.downpour import DownpourSGD

small = data.small()
job = DownpourSGD("mlp", "digits", replicas=3, shards=2, n_fetch=1, n_push=1,
                  optimizer="adagrad", lr=0.05, eval_every=100)
job.start()
job.cluster"""),
md("""`fit` trains for a number of steps (over all replicas together) or seconds, then pauses the replicas.
The history is recorded by a monitor thread while they run."""),
code("""job.fit(steps=600 if small else 3000)
job.history[-1]"""),
md("""## Staleness: the price and the point of asynchrony

Each shard counts, for every push, how many updates it applied since the pushing replica fetched."""),
code("""for s in job.server.stats():
    print(f"shard {s['index']} on {s['worker']}: {s['updates']} updates, staleness {s['staleness']}")
for i, f in job.book.figures().items():
    print(f"replica {i}: {f['steps']} steps, {f['pushes']} pushes, {f['fetches']} fetches on {f['worker']}")"""),
md("""## Change the rates while it trains

Fetching and pushing less often saves communication (the paper's `n_fetch`, `n_push`) at the cost of
staler parameters. `set` reaches running replicas from their next step. Bad values are refused and change
nothing."""),
code("""job.set(n_fetch=4, n_push=4)
before = {i: f["pushes"] for i, f in job.book.figures().items()}
job.fit(steps=400 if small else 2000)
after = job.book.figures()
print({i: (after[i]["pushes"] - before[i], after[i]["steps"]) for i in after})
try:
    job.set(n_push=0)
except ValueError as e:
    print("refused:", e)"""),
md("""## Add and remove replicas while it runs"""),
code("""job.add_replicas(1)
job.fit(steps=300 if small else 1500)
job.remove_replicas(2)
job.fit(steps=200 if small else 1000)
{i: f["state"] for i, f in job.book.figures().items()}"""),
code("""job.stop()
report = job.report()
print("test accuracy", round(report["final"]["test_accuracy"], 4), "examples/s", round(report["examples_per_second"]))
from IPython.display import Image
from dbkit.telemetry import plot_history
Image(filename=str(plot_history(report["history"], "plots/downpour.png", "Downpour SGD + Adagrad on digits")))"""),
md("""Things to try: `warm_start_steps=200` (one replica first, then the others), `optimizer="sgd"` (compare
with Adagrad), more replicas than cores (watch steps per replica fall), and `n_push=16` on the `speech` preset
(`DownpourSGD("speech", "speech", ...)`) where computation, not communication, dominates."""),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/02_downpour.ipynb")
