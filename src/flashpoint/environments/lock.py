"""The per-key lock: ``fcntl.flock`` on ``<root>/<key>.lock``, for threads and processes alike.

Why ``flock``: the kernel drops it when the holder's file is closed, which includes the holder dying (``kill -9``,
OOM), so a crashed builder never leaves a key locked and no lock file needs a stale-pid check. It belongs to the open
file, not the process, so two threads of one process that each open the file exclude each other too.

Lock files are never deleted: a process could have the old file open while another creates a new one under the
same name, and both would hold "the" lock. They are empty, one per key ever built.

Non-POSIX systems (Windows) have no ``fcntl``; there the lock raises ``ConfigError`` rather than pretending: an
environment cache shared without a lock would let two builders rename over each other.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from flashpoint.errors import ConfigError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["KeyLock", "is_locked"]


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
    _require_fcntl()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
