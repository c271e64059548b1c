import nbformat as nbf
nb = nbf.v4.new_notebook()
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell
nb.cells = [
md("""# 3. Sandblaster L-BFGS: a coordinator, history on the shards, work units

DistBelief Sec. 4.2. Batch methods like L-BFGS need the gradient of the *whole* training set at every step.
Sandblaster spreads that work: a **coordinator** runs L-BFGS but holds no vectors; the parameters, the
gradient, the search direction and the L-BFGS **history** (s, y pairs) all live on the **parameter shards**,
which answer commands (dot, axpy, scale, copy) with scalars. Each batch gradient is cut into many small
**work units** that replicas take as they become free, so a slow machine holds nobody up; near the end of
a batch, running units get **backup copies** and the first finisher wins."""),
code("""import numpy as np, scipy.optimize
from dbkit import data, nn
from dbkit.cluster import Cluster
from dbkit.cluster.sandblaster import SandblasterLBFGS

digits = data.load("digits")
net = nn.build("linear", digits.n_features, digits.n_classes, l2=1e-2)   # strictly convex
cluster = Cluster(n_workers=2, threads_per_worker=2)                     # room for 3 replicas"""),
md("""## Against scipy's L-BFGS-B on the same objective"""),
code("""with SandblasterLBFGS(net, digits, replicas=3, shards=2, work_unit_size=300, max_iterations=100,
                      client=cluster.client) as sb:
    sb.fit()
ours = sb.report()
X = digits.X_train.astype(np.float64)
ref = scipy.optimize.minimize(lambda p: net.loss_and_grad(p, X, digits.y_train),
                              net.init_params(0).astype(np.float64), jac=True, method="L-BFGS-B")
print("Sandblaster:", ours["final"]["full_batch_loss"], "after", ours["sandblaster"]["iterations"], "iterations")
print("scipy:      ", ref.fun, "after", ref.nit, "iterations")
ours["sandblaster"]"""),
md("""## A slow replica: load balancing and backup copies

Replica 0 is made ten times slower. With units handed out as replicas free up, it simply does fewer of them;
backup copies stop the batch from waiting for its last unit. Without balancing (an equal split up front),
every batch waits for the slow replica."""),
code("""rows = []
for label, opts in [("balanced + backups", dict(balance=True, backup=True)),
                    ("static equal split", dict(balance=False, backup=False))]:
    with SandblasterLBFGS(net, digits, replicas=3, shards=2, work_unit_size=40, slow_replicas={0: 10},
                          client=cluster.client, **opts) as sb:
        sb.start()
        for _ in range(3):
            sb.batch("params")
        b = sb.batch
        rows.append((label, round(float(np.median(b.batch_seconds)), 3), dict(b.units_done), b.backups_issued, b.backups_won))
for row in rows:
    print("%-20s batch %.3f s  units per replica %s  backups issued %d, won %d" % row)"""),
code("""cluster.close()"""),
]
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, "notebooks/03_sandblaster.ipynb")
