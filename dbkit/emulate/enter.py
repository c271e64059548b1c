"""Run a command on an emulated host: ``python -m dbkit.emulate.enter GROUP NETNS -- command ...``.

The process joins CPU group ``GROUP`` and network namespace ``NETNS`` (``-`` for this machine's own), then
becomes ``command``: everything it starts stays in both. A process of its own, rather than a hook run
between fork and exec, because such hooks are unsafe in a process with threads (a notebook's kernel).
"""

from __future__ import annotations

import os
import sys

from . import cpu_groups


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: python -m dbkit.emulate.enter GROUP NETNS -- command ...", file=sys.stderr)
        return 2
    group, space, command = argv[0], argv[1], argv[3:]
    cpu_groups.join(group)
    if space != "-":
        from pyroute2 import netns

        netns.setns(space)
    os.execvp(command[0], command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
