"""The server's secrets: values kept in its data directory, set and deleted by name, server-wide or for one app, and
given only to the workers whose endpoints name them (``spec.Secret``, Runpod's ``{{ RUNPOD_SECRET_<name> }}``).

Invariants:
- the values are in one JSON file, 0600 in a 0700 folder (``<data-dir>/secrets/``), replaced whole and renamed into
  place under a lock, so a reader sees the old set or the new one and two writers never lose each other's change;
- a name is never a path (``spec.SECRET_NAME``), so no name reaches outside the file;
- nothing here shows a value: ``SecretInfo`` has none, no message quotes one, and ``resolve`` is the only way out;
- an endpoint of app A gets A's secret of a name, else the server-wide one, never another app's (``resolve``);
  the plane asks ``resolver(spec.app)`` at each check and launch (decision 0103).
"""

from __future__ import annotations

import builtins
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.errors import BadInputError, ConfigError
from flashpoint.hosting.wholefile import locked, replace_whole
from flashpoint.spec import LABEL, EndpointSpec, missing_secrets, secret_name_problem

__all__ = ["MAX_VALUE_BYTES", "SecretInfo", "SecretStore"]

#: the largest value, in bytes of UTF-8: Runpod's limit (under 16 MiB)
MAX_VALUE_BYTES = 16 * 1024 * 1024 - 1
#: the file's format; a file of another is refused, never rewritten
VERSION = 1
FILE_NAME = "secrets.json"


@dataclass(frozen=True, slots=True)
class SecretInfo:
    """What may be shown of a secret: its name, its app (None: server-wide) and when it was set (wall seconds)."""

    name: str
    app: str | None
    created: float
    updated: float


class SecretStore:
    """The secrets under ``root`` (the folder is made 0700 on the first write). ``now`` gives wall time."""

    def __init__(self, root: Path, *, now: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.path = self.root / FILE_NAME
        self._now = now

    def __repr__(self) -> str:
        return f"SecretStore({str(self.root)!r})"

    def set(self, name: str, value: str, *, app: str | None = None) -> SecretInfo:
        """Set ``name`` (for ``app``, or server-wide) to ``value``, keeping its creation date when it existed.

        Raises:
            BadInputError: a bad name, app or value (the message never quotes the value).
        """
        _check(name, app)
        if not isinstance(value, str) or not value:
            raise BadInputError(f"secret {name!r} needs a value: a non-empty string")
        if "\0" in value:  # no process environment can hold a NUL
            raise BadInputError(f"the value of secret {name!r} holds a NUL character, which no environment can hold")
        try:
            size = len(value.encode())
        except UnicodeEncodeError:
            raise BadInputError(f"the value of secret {name!r} is not valid text (a lone surrogate)") from None
        if size > MAX_VALUE_BYTES:
            raise BadInputError(f"the value of secret {name!r} is {size} bytes; the most is {MAX_VALUE_BYTES}")
        with locked(self.root):
            records = self._read()
            now = self._now()
            old = records.get((name, app))
            created = old["created"] if old is not None else now
            records[(name, app)] = {"name": name, "app": app, "value": value, "created": created, "updated": now}
            self._write(records)
        return SecretInfo(name, app, created, now)

    def delete(self, name: str, *, app: str | None = None) -> bool:
        """Delete ``name`` (of ``app``, or the server-wide one); False when there was none."""
        _check(name, app)
        with locked(self.root):
            records = self._read()
            if records.pop((name, app), None) is None:
                return False
            self._write(records)
        return True

    def list(self, *, app: str | None = None, every: bool = True) -> list[SecretInfo]:
        """The secrets (names and dates only), sorted by app (server-wide first) and name: all of them when
        ``every``, else the server-wide ones and ``app``'s."""
        if app is not None:
            _check(None, app)
        out = [
            SecretInfo(r["name"], r["app"], r["created"], r["updated"])
            for (_, owner), r in self._read().items()
            if every or owner is None or owner == app
        ]
        return sorted(out, key=lambda info: (info.app is not None, info.app or "", info.name))

    def resolve(self, name: str, *, app: str | None = None) -> str | None:
        """The value an endpoint of ``app`` (None: one of no app) gets for ``name``: the app's own secret of that
        name, else the server-wide one; None when neither is set or the name is not a secret's."""
        if secret_name_problem(name) is not None:
            return None
        records = self._read()
        record = (records.get((name, app)) if app is not None else None) or records.get((name, None))
        return None if record is None else str(record["value"])

    def resolver(self, app: str | None = None) -> Callable[[str], str | None]:
        """``resolve`` for the endpoints of ``app``. The method itself is what a control plane is given
        (``ControlPlane(secrets=store.resolver)``): it asks it with each endpoint's app."""

        def resolve(name: str) -> str | None:
            return self.resolve(name, app=app)

        return resolve

    def missing(self, spec: EndpointSpec) -> builtins.list[str]:
        """The secrets ``spec``'s env names that an endpoint of its app (``spec.app``) gets no value for, each once, in
        the order first named: what a deploy is refused for before it takes a version number."""
        return list(missing_secrets(spec.env, self.resolver(spec.app)))

    # the file

    def _read(self) -> dict[tuple[str, str | None], dict[str, Any]]:
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"the secrets file {self.path} cannot be read: {exc.strerror}") from None
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != VERSION:
                raise ValueError("version")
            records = {}
            for record in data["secrets"]:
                name, app = record["name"], record["app"]
                if secret_name_problem(name) is not None or not (app is None or isinstance(app, str)):
                    raise ValueError("name")
                if not isinstance(record["value"], str):
                    raise ValueError("value")
                float(record["created"]), float(record["updated"])
                records[(name, app)] = record
        except (ValueError, KeyError, TypeError):
            # the message never quotes the file: it holds the values
            raise ConfigError(
                f"the secrets file {self.path} is not one this flashpoint wrote (format {VERSION}); move it away and "
                "set the secrets again"
            ) from None
        return records

    def _write(self, records: dict[tuple[str, str | None], dict[str, Any]]) -> None:
        body = json.dumps({"version": VERSION, "secrets": list(records.values())}, ensure_ascii=False).encode()
        replace_whole(self.root, FILE_NAME, body)


def _check(name: str | None, app: str | None) -> None:
    if name is not None and (problem := secret_name_problem(name)) is not None:
        raise BadInputError(problem)
    if app is not None and (not isinstance(app, str) or not LABEL.fullmatch(app)):
        raise BadInputError(
            f"an app's name is letters, digits, '.', '_' or '-' (a letter or digit first), at most 128; got "
            f"{repr(app)[:80]}"
        )
