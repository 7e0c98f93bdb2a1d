"""``python -m flashpoint.worker.launch [--parent PID] -- COMMAND...``: run a worker command of the user's own.

Such commands (an unmodified Runpod handler) cannot watch their parent or set themselves up; on Linux the kernel
watches the parent for them (the death signal set here survives ``exec``), and ``isolation.apply`` pins the process
to its cores and mounts its volume before the ``exec`` (both survive it too).
"""

from __future__ import annotations

import os
import signal
import sys

from flashpoint.worker import isolation


def die_with_parent(parent_pid: int | None) -> None:
    """Ask Linux to SIGKILL this process when its parent dies, and exit now if it already has."""
    if parent_pid is None:
        return
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main(argv: list[str]) -> None:
    parent: int | None = None
    if len(argv) >= 2 and argv[0] == "--parent" and argv[1].isdigit():
        parent, argv = int(argv[1]), argv[2:]
    if len(argv) < 2 or argv[0] != "--":
        sys.exit("usage: python -m flashpoint.worker.launch [--parent PID] -- COMMAND [ARG...]")
    die_with_parent(parent)
    isolation.apply()
    command = argv[1:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.exit(f"cannot run worker command {' '.join(command)!r}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
