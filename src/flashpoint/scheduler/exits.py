"""Why a worker process ended, as the plane needs to know it: by itself (its code is broken) or from outside.

A worker that exits before it ever pulls a job is a failed start only when it failed by itself: an exit status, or a
fault signal its own code raised (a segfault, an abort). A worker killed by someone else before its first pull (the
kernel's OOM killer during a heavy import, an operator's ``kill``, a node going away) says nothing about its handler:
it is a lost worker, and the endpoint's queued jobs keep waiting for the next one.
"""

from __future__ import annotations

import signal

#: signals a process raises on itself through its own faults; any other signal came from outside
SELF_INFLICTED = frozenset(
    int(s)
    for s in (
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGFPE,
        signal.SIGILL,
        signal.SIGABRT,
        signal.SIGSYS,
        signal.SIGTRAP,
        signal.SIGPIPE,
        signal.SIGXCPU,
        signal.SIGXFSZ,
    )
)


def failed_by_itself(code: int) -> bool:
    """True for an exit status (``code >= 0``) or a self-inflicted fault signal (``code == -signal``)."""
    return code >= 0 or -code in SELF_INFLICTED


def describe_exit(code: int, cause: str = "") -> str:
    """``exit code 1`` or ``killed by SIGKILL``; ``cause`` instead, when the backend said what happened (its process
    was lost from sight, not seen to end: no code or signal of its own is known)."""
    if cause:
        return cause
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"
