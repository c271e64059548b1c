"""Threads given up on: a replica's step that never returned (``dbkit.downpour.step_watch``). Python cannot end a
thread from outside, so such a thread runs on; a runtime closing does not wait for it (the in-process runtime
would otherwise wait its whole join timeout at every exit), and the process's exit ends it (its threads are
daemons)."""

from __future__ import annotations

import threading

# lock order: alone (a leaf: nothing is called under it)
_lock = threading.Lock()
_given_up: set[int] = set()


def give_up(thread: threading.Thread) -> None:
    """``thread`` runs a step that will not be waited for any more."""
    with _lock:
        if thread.ident is not None:
            _given_up.add(thread.ident)


def given_up(thread: threading.Thread) -> bool:
    """Whether ``thread`` (alive) was given up on."""
    with _lock:
        return thread.ident in _given_up and thread.is_alive()
