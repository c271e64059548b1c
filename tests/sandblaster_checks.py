"""What the Sandblaster tests share: the single-process reference gradient, a paused job, and a batch
gradient computed while a replica's machine is lost, checked exact against the reference."""

import threading
from collections.abc import Callable

import numpy as np


def reference(net, params, ds):
    """Loss and gradient of the whole training set at ``params``, in float64, in this process."""
    return net.loss_and_grad(params.astype(np.float64), ds.X_train.astype(np.float64), ds.y_train)


def paused(sb):
    """``sb`` started and paused: placed, with L-BFGS waiting between iterations."""
    sb.start()
    sb.pause()
    return sb


def exact_gradient_despite(sb, net, ds, lose: Callable[[], None], after: float, label: str = "") -> None:
    """One batch gradient while ``lose()`` runs ``after`` seconds in: it equals the reference, and the job
    then trains on one iteration with the replicas left."""
    killer = threading.Timer(after, lose)
    killer.start()
    try:
        f, acc = sb.batch_gradient()
    finally:
        killer.join()
    fr, gr = reference(net, sb.parameters(), ds)
    assert abs(f - fr) < 1e-5 * fr, label
    np.testing.assert_allclose(acc, gr, atol=2e-6, err_msg=label)
    sb.fit(steps=1, progress=False)
