"""Folders and files only this user may read: the state folder (``~/.flashpoint``: announcements with the CLI's keys,
volumes, environments) and the job store (every job's input and output). Other local users are not trusted
(DESIGN.md section 6; docs/architecture.md, "Private state").

- ``private_dir(path, ours=...)`` makes a folder 0700 (missing parents are made with the usual mode). An existing
  folder that is flashpoint's own (``ours``: the state folder, a job store's ``.flashpoint`` folder; older versions
  made them 0755) and that others may enter is made 0700, with one warning saying so; any other existing folder is
  left as it is (a ``--db`` somewhere the user chose: the store's files are private themselves).
- ``private_file(path)`` makes a file 0600 before anything writes it (SQLite then gives its ``-wal`` and ``-shm``
  files the same mode); an existing one of this user that others may read is made 0600, with a warning.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["STATE_DIR_NAME", "private_dir", "private_file"]

log = logging.getLogger("flashpoint")

#: the name of flashpoint's own folders (``~/.flashpoint``, a job store's ``./.flashpoint``)
STATE_DIR_NAME = ".flashpoint"


def _mine(info: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or info.st_uid == os.getuid()


def private_dir(path: Path, *, ours: bool) -> None:
    """Make ``path`` a folder only this user may enter (see the module docstring for an existing one).

    Raises:
        OSError: it cannot be made.
    """
    try:
        path.mkdir(mode=0o700)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        private_dir(path, ours=ours)
        return
    except FileExistsError:
        if ours:
            _tighten(path, 0o700, "folder")
        return
    os.chmod(path, 0o700)  # past the umask


def private_file(path: Path) -> None:
    """Make the file ``path`` (0600) when it is missing, else make this user's file 0600 when others may read it.
    A link is never followed.

    Raises:
        OSError: it cannot be made.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        _tighten(path, 0o600, "file")
        return
    os.close(fd)


def _tighten(path: Path, mode: int, what: str) -> None:
    """Make this user's existing ``path`` ``mode`` when group or others have any access to it, and say so."""
    try:
        info = os.lstat(path)
    except OSError:
        return
    bits = stat.S_IMODE(info.st_mode)
    kind_ok = stat.S_ISDIR(info.st_mode) if what == "folder" else stat.S_ISREG(info.st_mode)
    if not kind_ok or not _mine(info) or not bits & 0o077:
        return
    try:
        os.chmod(path, mode)
    except OSError as exc:
        log.warning(
            "other users can read the %s %s (mode %04o) and it cannot be made private: %s", what, path, bits, exc
        )
        return
    log.warning(
        "made the %s %s private (mode %04o, was %04o): it holds what other users of this machine must not read",
        what,
        path,
        mode,
        bits,
    )
