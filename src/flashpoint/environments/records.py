"""The JSON records kept beside each environment: what it holds, a build in progress, a recorded failure.

Every record is written whole to a temporary file and renamed over the old one, so a reader in another process sees
the old record or the new one, never half of either; a record that does not parse (a crash mid-write by something
else, a hand edit) reads as absent.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.environments.errors import EnvironmentBuildError

__all__ = ["BuildFailure", "BuildProgress", "EnvironmentRecord", "bounded_tail", "read_json", "write_json"]


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace ``path`` with ``data`` atomically (temporary file in the same folder, then ``os.replace``)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide a shared cache's records from its other users
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=2)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The object in ``path``, or ``None`` when it is missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _strings(value: Any) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


@dataclass(frozen=True)
class EnvironmentRecord:
    """``<key>.json``: what an environment holds and who used it when (its size is measured when listed)."""

    key: str
    requirements: tuple[str, ...]
    #: ``cpython-3.11``
    python: str
    #: the host environment (``sys.prefix``) whose site-packages it inherits
    host: str
    created: float
    #: updated by every ``ensure`` that finds it
    last_used: float
    #: every endpoint name ``ensure`` was called for, in first-use order
    endpoints: tuple[str, ...] = ()
    #: the site-packages directory, relative to the environment (the environment may be renamed: it is relocatable)
    site_packages: str = ""
    #: the host directories its ``.pth`` appends to ``sys.path`` after its own site-packages
    inherited: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "requirements": list(self.requirements),
            "python": self.python,
            "host": self.host,
            "created": self.created,
            "last_used": self.last_used,
            "endpoints": list(self.endpoints),
            "site_packages": self.site_packages,
            "inherited": list(self.inherited),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvironmentRecord:
        return cls(
            key=str(data.get("key", "")),
            requirements=_strings(data.get("requirements")),
            python=str(data.get("python", "")),
            host=str(data.get("host", "")),
            created=float(data.get("created", 0.0)),
            last_used=float(data.get("last_used", 0.0)),
            endpoints=_strings(data.get("endpoints")),
            site_packages=str(data.get("site_packages", "")),
            inherited=_strings(data.get("inherited")),
        )


@dataclass(frozen=True)
class BuildProgress:
    """``<key>.building``: a build running now, readable from any process ("building, 12 s, last line ...").

    It exists only while its builder holds the key's lock; ``EnvironmentCache.building`` checks the lock, so a record
    left by a builder that died is never reported as a live build.
    """

    key: str
    pid: int
    started: float
    endpoint: str
    requirements: tuple[str, ...]
    #: the installer's most recent output line ("" before the first)
    last_line: str = ""
    #: output lines so far
    lines: int = 0

    def elapsed(self, now: float) -> float:
        """Seconds since the build started, by the caller's clock."""
        return max(0.0, now - self.started)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "pid": self.pid,
            "started": self.started,
            "endpoint": self.endpoint,
            "requirements": list(self.requirements),
            "last_line": self.last_line,
            "lines": self.lines,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildProgress:
        return cls(
            key=str(data.get("key", "")),
            pid=int(data.get("pid", 0)),
            started=float(data.get("started", 0.0)),
            endpoint=str(data.get("endpoint", "")),
            requirements=_strings(data.get("requirements")),
            last_line=str(data.get("last_line", "")),
            lines=int(data.get("lines", 0)),
        )


@dataclass(frozen=True)
class BuildFailure:
    """``<key>.failed``: the last build of this key failed; ``ensure`` raises it again until asked to retry."""

    key: str
    requirements: tuple[str, ...]
    endpoint: str
    failed_at: float
    message: str
    #: the installer's exit status (``None`` when the failure was not the installer's: the runtime check, say)
    returncode: int | None
    #: the installer's last output lines (bounded)
    output_tail: tuple[str, ...]

    def error(self, *, recorded: bool) -> EnvironmentBuildError:
        """The exception ``ensure`` raises for this failure."""
        return EnvironmentBuildError(
            self.message,
            key=self.key,
            requirements=self.requirements,
            output_tail=self.output_tail,
            returncode=self.returncode,
            recorded=recorded,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "requirements": list(self.requirements),
            "endpoint": self.endpoint,
            "failed_at": self.failed_at,
            "message": self.message,
            "returncode": self.returncode,
            "output_tail": list(self.output_tail),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BuildFailure:
        code = data.get("returncode")
        return cls(
            key=str(data.get("key", "")),
            requirements=_strings(data.get("requirements")),
            endpoint=str(data.get("endpoint", "")),
            failed_at=float(data.get("failed_at", 0.0)),
            message=str(data.get("message", "")),
            returncode=int(code) if isinstance(code, int) else None,
            output_tail=_strings(data.get("output_tail")),
        )


def bounded_tail(lines: Sequence[str], *, max_lines: int = 40, max_bytes: int = 8192) -> tuple[str, ...]:
    """The last lines of ``lines`` that fit in ``max_lines`` and about ``max_bytes`` (UTF-8)."""
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-max_lines:]):
        size += len(line.encode("utf-8", "replace")) + 1
        if size > max_bytes and kept:
            break
        kept.append(line[-max_bytes:])
    return tuple(reversed(kept))
