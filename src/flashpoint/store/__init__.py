"""Job stores: the JobStore protocol, its memory and SQLite implementations, and ``open_store`` to pick one."""

from __future__ import annotations

import os
import re
from pathlib import Path

from flashpoint.errors import ConfigError
from flashpoint.store.base import JobStore
from flashpoint.store.memory import MemoryJobStore
from flashpoint.store.sqlite import SQLiteJobStore

__all__ = ["JobStore", "MemoryJobStore", "SQLiteJobStore", "open_store"]

#: the URL prefix of a SQLite file, as in SQLAlchemy: ``sqlite:///relative.db``, ``sqlite:////absolute.db``
SQLITE_PREFIX = "sqlite:///"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
_FORMS = "'memory' (the default), 'sqlite:///relative/path.db', 'sqlite:////absolute/path.db' or a file path"


def open_store(url: str | os.PathLike[str] | None) -> JobStore:
    """Open the job store a setting names.

    Args:
        url: ``None``, ``""`` or ``"memory"`` for a MemoryJobStore (jobs live as long as the process);
            ``"sqlite:///PATH"`` or a plain file path for a SQLiteJobStore. As in SQLAlchemy, the path after
            ``sqlite:///`` is relative unless it starts with ``/`` (``sqlite:////var/lib/flashpoint/jobs.db``);
            a leading ``~`` is expanded.

    Returns:
        The store; the caller closes it.

    Raises:
        ConfigError: ``url`` has a scheme other than ``sqlite:///``.
        StoreError: the SQLite file cannot be opened or created.

    Example:
        ``open_store("sqlite:///state/jobs.db")`` opens (and creates) ``state/jobs.db`` under the working directory.
    """
    if url is None:
        return MemoryJobStore()
    text = os.fspath(url)
    if text in ("", "memory"):
        return MemoryJobStore()
    if text.lower().startswith(SQLITE_PREFIX):
        text = text[len(SQLITE_PREFIX) :]
        if not text:
            raise ConfigError(f"job store {url!r} names no file; use {_FORMS}")
    elif _SCHEME.match(text):
        raise ConfigError(f"unknown job store {url!r}; use {_FORMS}")
    return SQLiteJobStore(Path(text).expanduser())
