"""The server's scoped API keys: made on the server, kept hashed in its data directory (``<data-dir>/keys/``), looked
up on every request that carries a key the server did not start with (decision 0093).

Invariants:
- a token (``fpk_`` and 43 URL-safe characters: 256 random bits) is returned once, by ``create``; the file holds only
  its SHA-256, so neither the file nor any answer can give it back;
- the keys are in one JSON file, 0600 in a 0700 folder, replaced whole and renamed into place under a lock
  (``wholefile.py``, as the secrets), so two writers never lose each other's change;
- ``lookup`` hashes the token and compares that hash with every stored one in constant time, with no early exit;
- a file that is not one this flashpoint wrote is refused with a ``ConfigError``, never rewritten.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashpoint.errors import BadInputError, ConfigError, ConflictError
from flashpoint.hosting.wholefile import locked, replace_whole

__all__ = ["APP_NAME", "KEY_NAME", "SCOPES", "TOKEN_PREFIX", "KeyInfo", "KeyStore", "new_token"]

#: the scopes a key may have, widest first (``access.py`` says what each may do)
SCOPES = ("admin", "deploy", "invoke")
#: what every token starts with: a leaked one is recognisable (secret scanners, logs) and never a server key
TOKEN_PREFIX = "fpk_"
#: a key's name: letters, digits, '.', '_', '-', a letter or digit first, at most 63
KEY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: an app's or an environment's name (issue 22)
APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
#: the name jobs submitted with the server's own keys record (``access.ADMIN_SERVER``): no key may take it
RESERVED = "server"
#: the file's format; a file of another is refused, never rewritten
VERSION = 1
FILE_NAME = "keys.json"
_HASH = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What may be shown of a key: never its token or hash. ``created`` is wall seconds; ``created_by`` names who
    made it (a key's name, ``server`` for the server's own keys)."""

    name: str
    scope: str
    app: str | None
    env: str | None
    created: float
    created_by: str


def new_token() -> str:
    """A fresh token: ``fpk_`` and 32 random bytes, URL-safe base64 (43 characters)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class KeyStore:
    """The keys under ``root`` (the folder is made 0700 on the first write). ``now`` gives wall time."""

    def __init__(self, root: Path, *, now: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.path = self.root / FILE_NAME
        self._now = now
        # the last file read, by its identity: a lookup per request reads the file only when it changed
        self._cache: tuple[tuple[int, int, int], dict[str, dict[str, Any]]] | None = None

    def __repr__(self) -> str:
        return f"KeyStore({str(self.root)!r})"

    def create(
        self, name: str, *, scope: str, app: str | None = None, env: str | None = None, by: str
    ) -> tuple[KeyInfo, str]:
        """Make key ``name`` and return what may be shown of it with its token, which nothing gives again.

        Raises:
            BadInputError: a bad name, scope, app or env, or a combination no key can have (an admin key for one
                app, an env without its app).
            ConflictError: a key of that name exists.
        """
        _check(name, scope, app, env)
        if name == RESERVED:
            raise BadInputError(
                f"{RESERVED!r} names the server's own keys (on the jobs they submit); pick another name"
            )
        if not isinstance(by, str) or not by:
            raise BadInputError("a key needs its creator's name (by=)")
        token = new_token()
        with locked(self.root):
            records = self._read()
            if name in records:
                raise ConflictError(
                    f"a key named {name!r} exists; revoke it first (`flashpoint keys revoke {name}`) or pick another "
                    "name"
                )
            record = {"name": name, "scope": scope, "app": app, "env": env, "created": self._now(),
                      "created_by": by, "sha256": _digest(token)}  # fmt: skip
            records[name] = record
            self._write(records)
        return _info(record), token

    def list(self) -> list[KeyInfo]:
        """Every key, by name: names, scopes, apps, envs and dates, never a token or hash."""
        return [_info(record) for _, record in sorted(self._read().items())]

    def revoke(self, name: str) -> bool:
        """Delete key ``name``: its token opens nothing from now on. False when there was none."""
        if not isinstance(name, str) or not KEY_NAME.fullmatch(name):
            return False
        with locked(self.root):
            records = self._read()
            if records.pop(name, None) is None:
                return False
            self._write(records)
        return True

    def lookup(self, token: str) -> KeyInfo | None:
        """The key whose token ``token`` is, or None.

        The token's SHA-256 is compared with every stored hash by ``hmac.compare_digest``, and the loop never stops
        early, so how long it takes does not depend on which bytes of a guess were right (decision 0093).
        """
        if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX):
            return None  # the prefix is public: refusing a token without it tells a caller nothing secret
        digest = _digest(token).encode()
        found: dict[str, Any] | None = None
        for record in self._read().values():
            if hmac.compare_digest(digest, record["sha256"].encode()):
                found = record
        return None if found is None else _info(found)

    # the file

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"the keys file {self.path} cannot be read: {exc.strerror}") from None
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)  # a replace makes a new inode
        if self._cache is not None and self._cache[0] == identity:
            return dict(self._cache[1])
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"the keys file {self.path} cannot be read: {exc.strerror}") from None
        records = _parse(text, self.path)
        self._cache = (identity, records)
        return dict(records)

    def _write(self, records: dict[str, dict[str, Any]]) -> None:
        body = json.dumps({"version": VERSION, "keys": list(records.values())}, ensure_ascii=False).encode()
        replace_whole(self.root, FILE_NAME, body)


def _parse(text: bytes, path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("version")
        records: dict[str, dict[str, Any]] = {}
        for record in data["keys"]:
            _check(record["name"], record["scope"], record["app"], record["env"])
            if not isinstance(record["sha256"], str) or not _HASH.fullmatch(record["sha256"]):
                raise ValueError("hash")
            if not isinstance(record["created_by"], str) or record["name"] in records:
                raise ValueError("record")
            float(record["created"])
            records[record["name"]] = record
    except (ValueError, KeyError, TypeError, BadInputError):
        raise ConfigError(
            f"the keys file {path} is not one this flashpoint wrote (format {VERSION}); move it away and create the "
            "keys again (`flashpoint keys create`)"
        ) from None
    return records


def _info(record: dict[str, Any]) -> KeyInfo:
    return KeyInfo(
        record["name"], record["scope"], record["app"], record["env"], float(record["created"]), record["created_by"]
    )


def _check(name: object, scope: object, app: object, env: object) -> None:
    if not isinstance(name, str) or not KEY_NAME.fullmatch(name):
        raise BadInputError(
            "a key's name is letters, digits, '.', '_' or '-' (a letter or digit first), at most 63; got "
            f"{repr(name)[:80]}"
        )
    if scope not in SCOPES:
        raise BadInputError(f"a key's scope is one of {', '.join(SCOPES)}; got {repr(scope)[:80]}")
    for what, value in (("app", app), ("env", env)):
        if value is not None and (not isinstance(value, str) or not APP_NAME.fullmatch(value)):
            raise BadInputError(
                f"an {what}'s name is letters, digits, '_' or '-' (a letter or digit first), at most 63; got "
                f"{repr(value)[:80]}"
            )
    if scope == "admin" and (app is not None or env is not None):
        raise BadInputError("an admin key is for the whole server: leave out --app and --env, or pick deploy or invoke")
    if env is not None and app is None:
        raise BadInputError("an environment belongs to an app: name the app too (--app A --env E)")
