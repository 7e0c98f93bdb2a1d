"""Announcements: how the CLI of this machine (``flashpoint status``, ``jobs``, ``gpus``, ``explain``...) finds the
planes this user runs. Every plane (``flashpoint serve``, ``flashpoint dev``, a script's embedded plane) writes one
file, ``<state_dir>/run/<pid>-<name>.json``, before it says it serves, and removes it when it stops.

One schema, ``Announcement``, written as JSON (``SCHEMA_VERSION`` 1)::

    {"version": 1, "kind": "server", "pid": 4242, "url": "http://127.0.0.1:8000", "key": "...",
     "app": "app.py", "startedAt": 1767225600.0}

``key`` is a key the plane minted for this machine's CLI (null for a server that asks for none), never one the user
configured: a file left behind by a killed plane holds a key that died with it. The file and its folders are this
user's only (0600 in 0700 folders: ``flashpoint/private.py``), and a file is replaced whole, never half-written.

The reader trusts nothing it finds: a file that is not this user's regular file, is not JSON, lacks a field, has a
field of the wrong type, names an unknown kind or a newer schema is skipped with the reason (``Skipped``), and a
file whose process is gone is removed. Files of the writers before the schema had a version (an embedded plane's
``{"pid", "url", "key"}``; serve's and dev's with ``kind``, ``app`` and ``startedAt``) read as version 0.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashpoint.private import private_dir
from flashpoint.scheduler.ownership.kernel import process_alive

__all__ = [
    "DEV",
    "EMBEDDED",
    "KINDS",
    "SCHEMA_VERSION",
    "SERVER",
    "Announced",
    "Announcement",
    "Refused",
    "Skipped",
    "read",
    "run_dir",
    "scan",
    "withdraw",
    "write",
]

log = logging.getLogger("flashpoint")

#: the schema this module writes; a reader skips a file of a newer one
SCHEMA_VERSION = 1
#: the most a reader reads of one file: an announcement is a few hundred bytes
MAX_BYTES = 64 * 1024

#: what runs a plane: ``flashpoint serve``, ``flashpoint dev``, a script's embedded plane
SERVER, DEV, EMBEDDED = "server", "dev", "embedded"
KINDS = (SERVER, DEV, EMBEDDED)
#: the file name's word for each kind (``<pid>-serve.json``, ``<pid>-dev.json``, ``<pid>-embedded-<name>.json``)
_FILE_WORD = {SERVER: "serve", DEV: "dev", EMBEDDED: "embedded"}


@dataclass(frozen=True)
class Announcement:
    """Where a plane of this user listens, with the key this machine's CLI may use, and what runs it."""

    kind: str
    url: str
    #: the key minted for this machine's CLI; None when the plane asks for no key
    key: str | None
    pid: int = field(default_factory=os.getpid)
    #: what the plane serves: serve's app (``app.py``), dev's project folder; None for a script's plane
    app: str | None = None
    #: when the plane started (seconds since the epoch)
    started_at: float = field(default_factory=time.time)
    version: int = SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "kind": self.kind,
            "pid": self.pid,
            "url": self.url,
            "key": self.key,
            "app": self.app,
            "startedAt": self.started_at,
        }


class Refused(ValueError):
    """A file that is not an announcement to trust; the message says why."""


@dataclass(frozen=True)
class Announced:
    """An announcement read back, and its file."""

    path: Path
    announcement: Announcement


@dataclass(frozen=True)
class Skipped:
    """A file of the folder that was not used, and why."""

    path: Path
    reason: str


def run_dir(state_dir: Path) -> Path:
    """The folder of the announcements: ``<state_dir>/run``."""
    return state_dir / "run"


# ----------------------------------------------------------------------------------------------------------------
# writing


def write(state_dir: Path, announcement: Announcement, *, name: str = "", quiet: bool = False) -> Path | None:
    """Announce a plane: ``<state_dir>/run/<pid>-<kind's word>[-<name>].json``, mode 0600 in 0700 folders, replaced
    whole. ``name`` tells apart several planes of one kind in one process (embedded planes).

    Returns the file, or None when it cannot be written (logged as a warning; at debug level when ``quiet``): the plane
    serves all the same, only this machine's CLI cannot find it.
    """
    folder = run_dir(state_dir)
    try:
        private_dir(state_dir, ours=True)  # 0700: announcements hold keys (flashpoint/private.py)
        private_dir(folder, ours=True)
        path = folder / f"{announcement.pid}-{_FILE_WORD[announcement.kind]}{'-' + name if name else ''}.json"
        partial = path.with_suffix(".tmp")  # not *.json: readers never see it
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(announcement.to_json(), handle)
        os.replace(partial, path)
        return path
    except OSError as exc:
        log.log(logging.DEBUG if quiet else logging.WARNING, "cannot announce to this machine's CLI in %s: %s",
                folder, exc)  # fmt: skip
        return None


def withdraw(path: Path | None) -> None:
    """Remove an announcement (``write``'s answer; None: nothing was written). Safe to call twice."""
    if path is not None:
        path.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------------------------
# reading


def read(path: Path) -> Announcement:
    """The announcement in ``path``, checked.

    Raises:
        Refused: the file is not this user's regular file, is larger than ``MAX_BYTES``, is not JSON, or is not an
            announcement of a schema this reader knows (a field missing or of the wrong type, an unknown kind, a newer
            version).
        OSError: it cannot be read.
    """
    # never follows a link, and never waits: a FIFO opens at once (O_NONBLOCK) and is refused as not a regular file
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise Refused(f"owned by another user (uid {info.st_uid})")
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise Refused(f"larger than {MAX_BYTES} bytes")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise Refused(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise Refused(f"not a JSON object but {type(data).__name__}")
    return _parse(data)


def _parse(data: dict[str, Any]) -> Announcement:
    version = data.get("version", 0)  # the writers before the schema had a version
    if not _is_int(version) or version < 0:
        raise Refused(f"version must be a whole number, got {version!r}")
    if version > SCHEMA_VERSION:
        raise Refused(f"written by a newer flashpoint (schema {version}; this one reads up to {SCHEMA_VERSION})")
    kind = data.get("kind", EMBEDDED if version == 0 else None)  # an embedded plane wrote no kind before version 1
    if kind not in KINDS:
        raise Refused(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    for name in ("pid", "url"):
        if name not in data:
            raise Refused(f"no {name!r}")
    pid, url, key, app = data["pid"], data["url"], data.get("key"), data.get("app")
    if not _is_int(pid) or pid <= 0:
        raise Refused(f"pid must be a positive whole number, got {pid!r}")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise Refused(f"url must be an http(s) URL, got {url!r}")
    if key is not None and not isinstance(key, str):
        raise Refused(f"key must be a string or null, got {type(key).__name__}")
    if app is not None and not isinstance(app, str):
        raise Refused(f"app must be a string or null, got {type(app).__name__}")
    started = data.get("startedAt", 0.0)
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        raise Refused(f"startedAt must be a number, got {started!r}")
    return Announcement(kind, url, key or None, pid, app, float(started), version)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _pid_from_name(path: Path) -> int:
    head = path.stem.partition("-")[0]
    return int(head) if head.isdigit() else -1


def scan(state_dir: Path) -> tuple[list[Announced], list[Skipped]]:
    """The announcements under ``<state_dir>/run`` whose process is alive, oldest file first, and the files skipped.

    A file whose process is gone (killed before it could clean up) is removed: an announcement whose pid is dead, or
    a file that cannot be used and whose name's pid is dead. A file that cannot be used while its writer lives (being
    written, say, or someone else's) is skipped and kept.
    """
    folder = run_dir(state_dir)
    if not folder.is_dir():
        return [], []
    found: list[Announced] = []
    skipped: list[Skipped] = []
    files = sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime if p.exists() else 0.0, p.name))
    for path in files:
        try:
            announcement = read(path)
        except (OSError, Refused) as exc:
            if not process_alive(_pid_from_name(path)):
                path.unlink(missing_ok=True)
            else:
                skipped.append(Skipped(path, str(exc) if isinstance(exc, Refused) else f"unreadable ({exc})"))
            continue
        if not process_alive(announcement.pid):
            path.unlink(missing_ok=True)
            continue
        found.append(Announced(path, announcement))
    return found, skipped
