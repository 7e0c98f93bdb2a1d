"""``python -m flashpoint.worker.launch --parent PID -- COMMAND...``: run a worker command that dies with its plane.

Commands of the user's own (an unmodified Runpod handler) cannot watch their parent; on Linux the kernel does it for
them: the death signal set here survives ``exec``.
"""

from __future__ import annotations

import os
import signal
import sys


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
    if len(argv) < 4 or argv[0] != "--parent" or argv[2] != "--":
        sys.exit("usage: python -m flashpoint.worker.launch --parent PID -- COMMAND [ARG...]")
    die_with_parent(int(argv[1]))
    command = argv[3:]
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.exit(f"cannot run worker command {' '.join(command)!r}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
