"""Stopping a build from another thread: the plane that asked for it closing, or the build's time limit passing.

``Interrupt`` is the one mechanism for both. It knows the installer process running now and kills it the moment it is
set, so the building thread, blocked reading that process's output, wakes up without polling anything; a step that
has not started yet sees it set and does not start. Its ``reason`` says which of the two stopped the build: the cache
records a time limit as the build's failure, but an interruption as nothing at all (the next ``ensure`` builds again).

The caller's interrupt (the plane's, one per build) is linked to the cache's own for that build (which its time limit
sets), so the running process is known in one place.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator

__all__ = ["INTERRUPTED", "TIMED_OUT", "Interrupt"]

#: the caller stopped the build (the plane closing): not a failure
INTERRUPTED = "interrupted"
#: the build ran past its time limit: a failure, recorded like any other
TIMED_OUT = "timed out"


class Interrupt:
    """A build's stop signal; every method is safe to call from any thread.

    ``set()`` kills the installer step running now, and ``watching`` refuses (kills at once) any step started after.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._reason: str | None = None
        self._running: set[subprocess.Popen[str]] = set()
        self._linked: list[Interrupt] = []
        #: pids of the processes this interrupt killed (a log line, or a test, can say which)
        self.killed: list[int] = []

    @property
    def reason(self) -> str | None:
        """``INTERRUPTED``, ``TIMED_OUT`` (or whatever ``set`` was given), or ``None`` while not set."""
        return self._reason

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or ``timeout`` seconds pass; whether it is set."""
        return self._event.wait(timeout)

    def set(self, reason: str = INTERRUPTED) -> bool:
        """Stop: kill the process running now, and set the interrupts linked to this one with the same reason. Only
        the first call counts (a time limit passing after the plane closed changes nothing); whether this one did."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self._event.set()
            running, linked = list(self._running), list(self._linked)
        for proc in running:
            self._kill(proc)
        for other in linked:
            other.set(reason)
        return True

    @contextlib.contextmanager
    def linked(self, other: Interrupt) -> Iterator[None]:
        """While the block runs, setting this interrupt sets ``other`` too (at once, when this one already is)."""
        with self._lock:
            self._linked.append(other)
            reason = self._reason
        if reason is not None:
            other.set(reason)
        try:
            yield
        finally:
            with self._lock:
                self._linked.remove(other)

    @contextlib.contextmanager
    def watching(self, proc: subprocess.Popen[str]) -> Iterator[None]:
        """While the block runs, setting this interrupt kills ``proc``; when it is set already, ``proc`` is killed now
        (the step it runs must not go on after the build was stopped)."""
        with self._lock:
            late = self._reason is not None
            if not late:
                self._running.add(proc)
        if late:
            self._kill(proc)
        try:
            yield
        finally:
            with self._lock:
                self._running.discard(proc)

    def _kill(self, proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:  # not reaped yet, so its pid is still its own
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            self.killed.append(proc.pid)
