"""The durable record of a team server's apps, environments and numbered versions (issue 22;
docs/decisions/0092-deployment-records.md): one SQLite file, ``<data-dir>/deployments.db`` (WAL, 0600 in a 0700
folder).

- A version is numbered 1, 2, 3, ... per environment by ``begin`` (outcome ``pending``), then ``finish``\\ ed as
  ``serving`` (the one serving before becomes ``replaced``, in the same transaction) or ``failed`` (with the reason).
- ``rollback`` makes a ``replaced`` version serve again, with no new number; ``undeploy`` stops the environment, or
  takes one endpoint out of the serving version (``EnvInfo.removed``, cleared by the next deploy or rollback).
- ``recover`` after a crash marks every ``pending`` version ``failed`` and returns what was serving.

Invariants: at most one ``serving`` and at most one ``pending`` version per environment, always (unique partial
indexes, so even a bug cannot write a second); every change is one transaction with its history event; names match
``APP_NAME`` (no dots, no slashes), so they never reach a path or split an endpoint id. Pure of HTTP and of the
scheduler; the manifest is the caller's, opaque here.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flashpoint.errors import BadInputError, ConflictError, NotFoundError, StoreError
from flashpoint.private import private_dir, private_file

__all__ = [
    "APP_NAME",
    "FILE_NAME",
    "INTERRUPTED",
    "AppInfo",
    "Deployments",
    "EnvInfo",
    "Event",
    "Outcome",
    "VersionInfo",
    "check_name",
]

#: an app's or an environment's name: no dots (an endpoint id is ``app.env.name``), no slashes, at most 63
APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
#: the file's name in the data directory
FILE_NAME = "deployments.db"
#: the detail of a version a restart found still rolling out
INTERRUPTED = "interrupted: the server stopped during its rollout"
#: the schema this code writes (``pragma user_version``)
SCHEMA_VERSION = 1

Outcome = Literal["pending", "serving", "replaced", "failed"]
EventKind = Literal["deploy", "serve", "fail", "rollback", "undeploy"]

_SCHEMA = (
    "create table apps (name text primary key, created_by text not null, created_at real not null)",
    """create table envs (
        app text not null references apps (name) on delete cascade,
        name text not null,
        created_by text not null,
        created_at real not null,
        removed text not null default '[]',
        primary key (app, name))""",
    """create table versions (
        app text not null,
        env text not null,
        number integer not null,
        digest text not null,
        created_by text not null,
        created_at real not null,
        outcome text not null check (outcome in ('pending', 'serving', 'replaced', 'failed')),
        detail text not null default '',
        manifest text not null,
        primary key (app, env, number),
        foreign key (app, env) references envs (app, name) on delete cascade)""",
    "create unique index one_serving on versions (app, env) where outcome = 'serving'",
    "create unique index one_pending on versions (app, env) where outcome = 'pending'",
    """create table events (
        seq integer primary key autoincrement,
        app text not null,
        env text not null,
        kind text not null,
        version integer,
        by text not null,
        at real not null,
        detail text not null default '',
        foreign key (app, env) references envs (app, name) on delete cascade)""",
    "create index events_env on events (app, env, seq)",
)


def check_name(kind: str, value: object) -> str:
    """``value`` when it is a valid name for ``kind`` ("app", "environment"), else ``BadInputError`` saying the rule."""
    if isinstance(value, str) and APP_NAME.fullmatch(value):
        return value
    shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
    raise BadInputError(
        f"{kind} name must be letters, digits, '_' or '-' (at most 63), starting with a letter or digit; got {shown}"
    )


def _check_endpoint(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > 200 or "\0" in name:
        raise BadInputError(f"an endpoint name must be a non-empty string of at most 200 characters, got {name!r:.80}")
    return name


@dataclass(frozen=True, slots=True)
class AppInfo:
    """An app: its name, who made it and when (wall seconds)."""

    name: str
    created_by: str
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class EnvInfo:
    """An environment of an app: the number of its serving version (None: nothing serves) and the endpoints
    undeployed from it (``removed``, until the next deploy or rollback)."""

    app: str
    name: str
    created_by: str
    created_at: float
    serving: int | None
    removed: frozenset[str] = field(default_factory=frozenset)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "removed": sorted(self.removed)}


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """A numbered version of an environment: the artifact it runs, who made it and when, its outcome (``detail``:
    why it failed) and the caller's manifest."""

    app: str
    env: str
    number: int
    digest: str
    created_by: str
    created_at: float
    outcome: Outcome
    detail: str
    manifest: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """What ``/v1/apps/...`` and ``flashpoint env get`` show: not the manifest."""
        return {key: value for key, value in dataclasses.asdict(self).items() if key != "manifest"}


@dataclass(frozen=True, slots=True)
class Event:
    """One line of an environment's history."""

    app: str
    env: str
    kind: EventKind
    version: int | None
    by: str
    at: float
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, "by": self.by, "at": self.at, "detail": self.detail}


_VERSION_COLUMNS = "app, env, number, digest, created_by, created_at, outcome, detail, manifest"


def _version(row: tuple[Any, ...]) -> VersionInfo:
    app, env, number, digest, by, at, outcome, detail, manifest = row
    return VersionInfo(app, env, number, digest, by, at, outcome, detail, json.loads(manifest))


class Deployments:
    """The records in the SQLite file ``path`` (its folder made 0700, the file 0600). ``now`` gives wall time. One
    connection, used under a lock: calls are short."""

    def __init__(self, path: Path, *, now: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self._now = now
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = self._open()

    def __repr__(self) -> str:
        return f"Deployments({str(self.path)!r})"

    # ----------------------------------------------------------------------------------------------------------------
    # the file

    def _open(self) -> sqlite3.Connection:
        try:
            private_dir(self.path.parent, ours=False)
            for companion in (Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
                if companion.exists():
                    private_file(companion)
            private_file(self.path)
        except OSError as exc:
            raise StoreError(f"cannot create the deployment records {self.path}: {exc}") from None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the deployment records {self.path}: {exc}") from None
        try:
            conn.execute("pragma busy_timeout = 5000")
            conn.execute("pragma journal_mode = wal")
            conn.execute("pragma synchronous = full")
            conn.execute("pragma foreign_keys = on")
            conn.execute("begin immediate")
            version = conn.execute("pragma user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the deployment records {self.path} have schema version {version}, newer than this flashpoint "
                    f"knows ({SCHEMA_VERSION}); upgrade flashpoint"
                )
            if version == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"pragma user_version = {SCHEMA_VERSION}")
            conn.execute("commit")
        except BaseException as exc:
            if conn.in_transaction:
                conn.execute("rollback")
            conn.close()
            if isinstance(exc, sqlite3.Error):
                hint = (
                    "it is not a SQLite database or is corrupt: move it aside" if "not a database" in str(exc) else ""
                )
                raise StoreError(
                    f"cannot open the deployment records {self.path}: {exc}; {hint}".rstrip("; ")
                ) from None
            raise
        return conn

    def close(self) -> None:
        """Close the file (later calls raise ``StoreError``)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the lock."""
        with self._lock:
            if self._conn is None:
                raise StoreError(f"the deployment records {self.path} are closed")
            conn = self._conn
            try:
                conn.execute("begin immediate")
                yield conn
                conn.execute("commit")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("rollback")
                raise StoreError(f"deployment records {self.path}: {exc}") from exc
            except BaseException:
                if conn.in_transaction:
                    conn.execute("rollback")
                raise

    # ----------------------------------------------------------------------------------------------------------------
    # reading (inside a transaction)

    @staticmethod
    def _app(conn: sqlite3.Connection, name: str) -> AppInfo | None:
        row = conn.execute("select name, created_by, created_at from apps where name = ?", (name,)).fetchone()
        return AppInfo(*row) if row else None

    @staticmethod
    def _env(conn: sqlite3.Connection, app: str, name: str) -> EnvInfo | None:
        row = conn.execute(
            "select e.app, e.name, e.created_by, e.created_at, e.removed, v.number from envs e left join versions v "
            "on v.app = e.app and v.env = e.name and v.outcome = 'serving' where e.app = ? and e.name = ?",
            (app, name),
        ).fetchone()
        if row is None:
            return None
        app_, name_, by, at, removed, serving = row
        return EnvInfo(app_, name_, by, at, serving, frozenset(json.loads(removed)))

    def _need_env(self, conn: sqlite3.Connection, app: str, env: str) -> EnvInfo:
        check_name("app", app)
        check_name("environment", env)
        info = self._env(conn, app, env)
        if info is None:
            raise NotFoundError(
                f"no environment {app}/{env}; deploy to it first (flashpoint deploy DIR --app {app} --env {env})"
            )
        return info

    @staticmethod
    def _one(
        conn: sqlite3.Connection, app: str, env: str, where: str, params: tuple[Any, ...] = ()
    ) -> VersionInfo | None:
        row = conn.execute(
            f"select {_VERSION_COLUMNS} from versions where app = ? and env = ? and {where} "
            "order by number desc limit 1",
            (app, env, *params),
        ).fetchone()
        return _version(row) if row else None

    def _event(
        self,
        conn: sqlite3.Connection,
        app: str,
        env: str,
        kind: EventKind,
        version: int | None,
        by: str,
        detail: str = "",
    ) -> None:
        conn.execute(
            "insert into events (app, env, kind, version, by, at, detail) values (?, ?, ?, ?, ?, ?, ?)",
            (app, env, kind, version, by, self._now(), detail),
        )

    def _read(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the deployment records {self.path} are closed")
        return self._conn

    # ----------------------------------------------------------------------------------------------------------------
    # apps

    def create_app(self, name: str, *, by: str) -> AppInfo:
        """Make the app ``name``.

        Raises:
            BadInputError: a bad name.
            ConflictError: it exists.
        """
        check_name("app", name)
        with self._tx() as conn:
            if self._app(conn, name) is not None:
                raise ConflictError(f"app {name!r} exists; deploy to it, or choose another name")
            conn.execute("insert into apps (name, created_by, created_at) values (?, ?, ?)", (name, by, self._now()))
            info = self._app(conn, name)
        assert info is not None
        return info

    def get_app(self, name: str) -> AppInfo | None:
        """The app ``name``, or None."""
        check_name("app", name)
        with self._lock:
            return self._app(self._read(), name)

    def list_apps(self) -> list[AppInfo]:
        """Every app, by name."""
        with self._lock:
            rows = self._read().execute("select name, created_by, created_at from apps order by name").fetchall()
        return [AppInfo(*row) for row in rows]

    def delete_app(self, name: str) -> bool:
        """Delete the app, its environments, versions and history; whether it existed."""
        check_name("app", name)
        with self._tx() as conn:
            return conn.execute("delete from apps where name = ?", (name,)).rowcount > 0

    # ----------------------------------------------------------------------------------------------------------------
    # environments

    def _create_env(self, conn: sqlite3.Connection, app: str, name: str, by: str) -> EnvInfo:
        if self._app(conn, app) is None:
            conn.execute("insert into apps (name, created_by, created_at) values (?, ?, ?)", (app, by, self._now()))
        conn.execute(
            "insert into envs (app, name, created_by, created_at) values (?, ?, ?, ?)", (app, name, by, self._now())
        )
        info = self._env(conn, app, name)
        assert info is not None
        return info

    def create_env(self, app: str, name: str, *, by: str) -> EnvInfo:
        """Make the environment ``name`` of ``app`` (and the app, when it is missing).

        Raises:
            BadInputError: a bad name.
            ConflictError: it exists.
        """
        check_name("app", app)
        check_name("environment", name)
        with self._tx() as conn:
            if self._env(conn, app, name) is not None:
                raise ConflictError(f"environment {app}/{name} exists; deploy to it, or choose another name")
            return self._create_env(conn, app, name, by)

    def get_env(self, app: str, name: str) -> EnvInfo | None:
        """The environment, or None."""
        check_name("app", app)
        check_name("environment", name)
        with self._lock:
            return self._env(self._read(), app, name)

    def list_envs(self, app: str) -> list[EnvInfo]:
        """The app's environments, by name.

        Raises:
            NotFoundError: no such app.
        """
        check_name("app", app)
        with self._lock:
            conn = self._read()
            if self._app(conn, app) is None:
                raise NotFoundError(f"no app {app!r}; flashpoint apps lists them")
            names = [row[0] for row in conn.execute("select name from envs where app = ? order by name", (app,))]
            found = [self._env(conn, app, name) for name in names]
        return [info for info in found if info is not None]

    def delete_env(self, app: str, name: str) -> bool:
        """Delete the environment, its versions and history; whether it existed."""
        check_name("app", app)
        check_name("environment", name)
        with self._tx() as conn:
            return conn.execute("delete from envs where app = ? and name = ?", (app, name)).rowcount > 0

    # ----------------------------------------------------------------------------------------------------------------
    # versions

    def begin(self, app: str, env: str, *, digest: str, by: str, manifest: dict[str, Any]) -> VersionInfo:
        """Number a new version of ``app``/``env`` (made when missing), ``pending`` until ``finish``.

        Raises:
            BadInputError: a bad name, or a manifest that is not JSON.
            ConflictError: a version of that environment is still rolling out.
        """
        check_name("app", app)
        check_name("environment", env)
        try:
            text = json.dumps(manifest, sort_keys=True)
        except (TypeError, ValueError) as exc:
            raise BadInputError(f"a version's manifest must be JSON: {exc}") from None
        with self._tx() as conn:
            if self._env(conn, app, env) is None:
                self._create_env(conn, app, env, by)
            pending = self._one(conn, app, env, "outcome = 'pending'")
            if pending is not None:
                raise ConflictError(
                    f"version {pending.number} of {app}/{env} is still rolling out; wait for it to finish, then "
                    "deploy again"
                )
            number = conn.execute(
                "select coalesce(max(number), 0) + 1 from versions where app = ? and env = ?", (app, env)
            ).fetchone()[0]
            conn.execute(
                f"insert into versions ({_VERSION_COLUMNS}) values (?, ?, ?, ?, ?, ?, 'pending', '', ?)",
                (app, env, number, digest, by, self._now(), text),
            )
            self._event(conn, app, env, "deploy", number, by)
            info = self._one(conn, app, env, "number = ?", (number,))
        assert info is not None
        return info

    def finish(
        self, app: str, env: str, number: int, outcome: Literal["serving", "failed"], detail: str = ""
    ) -> VersionInfo:
        """End the pending version ``number``: ``serving`` (the one serving before becomes ``replaced``, the
        environment's ``removed`` set is cleared) or ``failed`` (``detail``: why).

        Raises:
            BadInputError: another outcome.
            NotFoundError: no such environment or version.
            ConflictError: the version is not pending.
        """
        if outcome not in ("serving", "failed"):
            raise BadInputError(f"a rollout ends 'serving' or 'failed', got {outcome!r}")
        with self._tx() as conn:
            self._need_env(conn, app, env)
            version = self._one(conn, app, env, "number = ?", (number,))
            if version is None:
                raise NotFoundError(f"{app}/{env} has no version {number}")
            if version.outcome != "pending":
                raise ConflictError(f"version {number} of {app}/{env} is {version.outcome}, not rolling out")
            if outcome == "serving":
                self._serve(conn, app, env, number)
                self._event(conn, app, env, "serve", number, version.created_by, detail)
            else:
                conn.execute(
                    "update versions set outcome = 'failed', detail = ? where app = ? and env = ? and number = ?",
                    (detail, app, env, number),
                )
                self._event(conn, app, env, "fail", number, version.created_by, detail)
            info = self._one(conn, app, env, "number = ?", (number,))
        assert info is not None
        return info

    @staticmethod
    def _serve(conn: sqlite3.Connection, app: str, env: str, number: int) -> None:
        """``number`` serves; the one serving before is ``replaced``; nothing is removed any more."""
        conn.execute(
            "update versions set outcome = 'replaced' where app = ? and env = ? and outcome = 'serving'", (app, env)
        )
        conn.execute(
            "update versions set outcome = 'serving', detail = '' where app = ? and env = ? and number = ?",
            (app, env, number),
        )
        conn.execute("update envs set removed = '[]' where app = ? and name = ?", (app, env))

    def rollback(self, app: str, env: str, *, to: int | None = None, by: str) -> VersionInfo:
        """Make an older version serve again, with no new number: ``to`` (a version that served before and was
        replaced), by default the newest replaced version before the serving one (or the newest replaced one when
        nothing serves). The version serving becomes ``replaced``.

        Raises:
            NotFoundError: no such environment or version, or none to go back to.
            BadInputError: ``to`` names a version that never served, or the one serving.
            ConflictError: a version is still rolling out.
        """
        with self._tx() as conn:
            self._need_env(conn, app, env)
            pending = self._one(conn, app, env, "outcome = 'pending'")
            if pending is not None:
                raise ConflictError(
                    f"version {pending.number} of {app}/{env} is still rolling out; wait for it to finish"
                )
            current = self._one(conn, app, env, "outcome = 'serving'")
            if to is None:
                below = current.number if current is not None else None
                target = self._one(
                    conn, app, env, "outcome = 'replaced' and number < coalesce(?, number + 1)", (below,)
                )
                if target is None:
                    raise NotFoundError(f"{app}/{env} has no earlier version that served to roll back to")
            else:
                if isinstance(to, bool) or not isinstance(to, int):
                    raise BadInputError(f"a version number is a whole number, got {to!r}")
                target = self._one(conn, app, env, "number = ?", (to,))
                if target is None:
                    raise NotFoundError(f"{app}/{env} has no version {to}; flashpoint env get {app} {env} lists them")
                if target.outcome != "replaced":
                    why = {
                        "serving": "it is the one serving",
                        "failed": f"it failed and never served ({target.detail})"
                        if target.detail
                        else "it failed and never served",
                        "pending": "it is still rolling out",
                    }[target.outcome]
                    raise BadInputError(
                        f"cannot roll {app}/{env} back to version {to}: {why}; choose a version that served before"
                    )
            self._serve(conn, app, env, target.number)
            detail = f"from version {current.number}" if current is not None else "from no serving version"
            self._event(conn, app, env, "rollback", target.number, by, detail)
            info = self._one(conn, app, env, "number = ?", (target.number,))
        assert info is not None
        return info

    def serving(self, app: str, env: str) -> VersionInfo | None:
        """The version serving ``app``/``env``, or None."""
        check_name("app", app)
        check_name("environment", env)
        with self._lock:
            return self._one(self._read(), app, env, "outcome = 'serving'")

    def versions(self, app: str, env: str) -> list[VersionInfo]:
        """Every version of ``app``/``env``, newest first."""
        check_name("app", app)
        check_name("environment", env)
        with self._lock:
            rows = self._read().execute(
                f"select {_VERSION_COLUMNS} from versions where app = ? and env = ? order by number desc", (app, env)
            )
            return [_version(row) for row in rows]

    def history(self, app: str, env: str) -> list[Event]:
        """The environment's events, oldest first."""
        check_name("app", app)
        check_name("environment", env)
        with self._lock:
            rows = self._read().execute(
                "select app, env, kind, version, by, at, detail from events where app = ? and env = ? order by seq",
                (app, env),
            )
            return [Event(*row) for row in rows]

    def undeploy(self, app: str, env: str, *, endpoint: str | None = None, by: str) -> EnvInfo:
        """Stop serving: the whole environment (``endpoint`` None: its serving version becomes ``replaced``), or one
        endpoint of the serving version (kept in ``EnvInfo.removed`` until the next deploy or rollback).

        Raises:
            NotFoundError: no such environment.
            ConflictError: nothing serves there, or a version is still rolling out.
        """
        if endpoint is not None:
            _check_endpoint(endpoint)
        with self._tx() as conn:
            info = self._need_env(conn, app, env)
            pending = self._one(conn, app, env, "outcome = 'pending'")
            if pending is not None:
                raise ConflictError(
                    f"version {pending.number} of {app}/{env} is still rolling out; wait for it to finish"
                )
            if info.serving is None:
                raise ConflictError(f"nothing serves {app}/{env}; there is nothing to undeploy")
            if endpoint is None:
                conn.execute(
                    "update versions set outcome = 'replaced' where app = ? and env = ? and outcome = 'serving'",
                    (app, env),
                )
                conn.execute("update envs set removed = '[]' where app = ? and name = ?", (app, env))
                self._event(conn, app, env, "undeploy", info.serving, by)
            else:
                removed = sorted(info.removed | {endpoint})
                conn.execute("update envs set removed = ? where app = ? and name = ?", (json.dumps(removed), app, env))
                self._event(conn, app, env, "undeploy", info.serving, by, f"endpoint {endpoint}")
            after = self._env(conn, app, env)
        assert after is not None
        return after

    def recover(self) -> list[VersionInfo]:
        """After a restart: every ``pending`` version becomes ``failed`` (``INTERRUPTED``); returns every
        environment's serving version, by app and environment (what the server must bring back up)."""
        with self._tx() as conn:
            stuck = conn.execute(f"select {_VERSION_COLUMNS} from versions where outcome = 'pending'").fetchall()
            for row in stuck:
                version = _version(row)
                conn.execute(
                    "update versions set outcome = 'failed', detail = ? where app = ? and env = ? and number = ?",
                    (INTERRUPTED, version.app, version.env, version.number),
                )
                self._event(conn, version.app, version.env, "fail", version.number, "server", INTERRUPTED)
            rows = conn.execute(
                f"select {_VERSION_COLUMNS} from versions where outcome = 'serving' order by app, env"
            ).fetchall()
        return [_version(row) for row in rows]
