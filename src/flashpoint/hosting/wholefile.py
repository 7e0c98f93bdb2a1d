"""A private file replaced whole: what the server's secret and key stores share (``secretstore.py``,
``keystore.py``).

- ``locked(root)``: an exclusive ``fcntl`` lock on ``root/lock``, the folder made 0700 first, so two writers (two
  processes, say a server and ``flashpoint secret --data-dir``) never lose each other's change;
- ``replace_whole(root, name, body)``: writes ``body`` to a 0600 temporary file beside ``root/name``, syncs it and
  renames it into place, then syncs the folder, so a reader sees the old file or the new one and a crash leaves one
  of them.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from flashpoint.private import private_dir, private_file

__all__ = ["locked", "replace_whole"]


@contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the exclusive lock of the folder ``root`` (made 0700 when missing) for the ``with`` block."""
    private_dir(root, ours=True)
    lock = root / "lock"
    private_file(lock)
    fd = os.open(lock, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing it lets the lock go


def replace_whole(root: Path, name: str, body: bytes) -> None:
    """Make ``root/name`` hold ``body`` (0600), atomically; call it under ``locked(root)``."""
    temporary = root / f".{name}.{os.getpid()}.tmp"
    temporary.unlink(missing_ok=True)
    private_file(temporary)  # 0600 before a byte is written
    try:
        with open(temporary, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, root / name)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    directory = os.open(root, os.O_RDONLY)
    try:  # the rename itself survives a crash
        os.fsync(directory)
    finally:
        os.close(directory)
