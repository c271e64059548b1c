"""The emulated cluster's reaper: ``python -m dbkit.emulate.reaper OWNER_PID``.

A ``Cluster`` closes itself at the interpreter's exit, but a process that is killed runs no exit hooks: a
notebook kernel that Jupyter shuts down is given a few seconds and then SIGKILLed, and a restart does the same.
So ``Cluster.start`` also starts this small process, in a session of its own. It waits for the owner to end
(a pidfd, so a reused process id cannot fool it) and then removes the cluster, unless the owner closed or
detached it first (it stops the reaper then) or the cluster that is up now is another's.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time


def wait_for_exit(pid: int) -> None:
    """Return when process ``pid`` has ended."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd on this kernel: poll
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m dbkit.emulate.reaper OWNER_PID", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the owner's end (or its SIGTERM) ends this process
    wait_for_exit(int(argv[0]))
    from .cluster import ClusterState, tear_down

    state = ClusterState.load()
    if state is None or state.reaper == os.getpid():  # never another cluster's hosts
        tear_down()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
