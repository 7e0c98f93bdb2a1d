"""The per-key lock: ``fcntl.flock`` on ``<root>/<key>.lock``, for threads and processes alike; and the in-use hold:
a shared ``flock`` on ``<root>/<key>.inuse``.

Why ``flock``: the kernel drops it when the holder's file is closed, which includes the holder dying (``kill -9``,
OOM), so a crashed builder never leaves a key locked and no lock file needs a stale-pid check. It belongs to the open
file, not the process, so two threads of one process that each open the file exclude each other too.

Lock files are never deleted: a process could have the old file open while another creates a new one under the
same name, and both would hold "the" lock. They are empty, one per key ever built.

The in-use hold is a second file because it is a different lock: a plane whose endpoint runs in an environment holds
it *shared* (any number of planes at once) for as long as it may start workers there, and ``prune`` asks for it
*exclusively* without waiting, to learn whether anyone holds it. A shared hold on the key's own lock would make every
later ``ensure`` of that key (which takes the key lock exclusively) wait for the plane to close. Holds are taken only
under the key lock (``EnvironmentCache.ensure``) and ``prune`` asks under the key lock too, so between its question and
its removal no hold can begin. The ``.inuse`` file is created by the first hold and, like the lock file, never deleted.

Non-POSIX systems (Windows) have no ``fcntl``; there the lock raises ``ConfigError`` rather than pretending: an
environment cache shared without a lock would let two builders rename over each other.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from types import TracebackType

from flashpoint.errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["InUseHold", "KeyLock", "in_use", "is_locked"]


def _require_fcntl() -> None:
    if fcntl is None:  # pragma: no cover - Windows
        raise ConfigError("per-endpoint environments need a POSIX system: their cache is locked with fcntl.flock")


class KeyLock:
    """An exclusive lock on one key. ``with KeyLock(path):`` blocks until it is held; ``acquire(blocking=False)``
    returns ``False`` at once when someone else holds it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, *, blocking: bool = True) -> bool:
        _require_fcntl()
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this KeyLock")
        # O_CLOEXEC is Python's default: the installer it starts must not inherit (and so outlive us holding) the lock
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the file drops the flock

    def __enter__(self) -> KeyLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def is_locked(path: Path) -> bool:
    """Whether someone holds the lock at ``path`` now (a shared probe: it never delays a holder or a waiter long)."""
    _require_fcntl()  # before fcntl's constants are read
    return _probe(path, fcntl.LOCK_SH)


def _probe(path: Path, mode: int) -> bool:
    """Whether a ``flock`` of ``mode`` on ``path`` would have to wait (someone holds one that conflicts); taken and
    dropped at once when it would not."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class InUseHold:
    """A shared ``flock`` on an environment's ``<key>.inuse``: while it is held, ``prune`` leaves the environment alone.

    Taken by ``EnvironmentCache.ensure(hold=True)`` under the key's lock. It ends with ``release()``, when the hold is
    garbage collected, or when its process ends (the kernel drops a dead process's flocks, as for ``KeyLock``). The
    file is opened close-on-exec: a worker started by the holder does not inherit it.
    """

    def __init__(self, path: Path) -> None:
        _require_fcntl()
        self.path = path
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            # never waits long: prune only probes (LOCK_NB), and only under the key lock, which our caller holds
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        self._close = weakref.finalize(self, os.close, fd)

    @property
    def held(self) -> bool:
        return self._close.alive

    def release(self) -> None:
        """Let go (closing the file drops the flock); a second call does nothing."""
        self._close()


def in_use(path: Path) -> bool:
    """Whether anyone holds an ``InUseHold`` on ``path`` now: an exclusive probe that does not wait (while it lasts, a
    new hold waits for it, a few microseconds)."""
    _require_fcntl()
    return _probe(path, fcntl.LOCK_EX)
