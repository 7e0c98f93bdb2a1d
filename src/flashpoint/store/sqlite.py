"""SQLiteJobStore: job records in one SQLite file (WAL), kept across crashes and restarts of the control plane."""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from flashpoint.errors import StoreError
from flashpoint.jobs import TERMINAL, Job, JobError, JobStatus, Placement, Reason
from flashpoint.private import STATE_DIR_NAME, private_dir, private_file
from flashpoint.store.runs import MAX_RUNS_KEPT, Outcome, ScheduleRun
from flashpoint.store.usage import UsageRecord

CREATE_JOBS = """
create table if not exists jobs (
    seq integer primary key autoincrement,
    id text unique not null,
    endpoint text not null,
    status text not null,
    created_at real not null,
    expires_at real not null,
    data text not null
)
"""
CREATE_JOBS_STATUS = "create index if not exists jobs_status on jobs (status)"
CREATE_JOBS_ENDPOINT_STATUS = "create index if not exists jobs_endpoint_status on jobs (endpoint, status)"
CREATE_JOBS_EXPIRES_AT = "create index if not exists jobs_expires_at on jobs (expires_at)"


def _migrate_1(conn: sqlite3.Connection) -> None:
    """Version 1: the jobs table and its indexes."""
    for statement in (CREATE_JOBS, CREATE_JOBS_STATUS, CREATE_JOBS_ENDPOINT_STATUS, CREATE_JOBS_EXPIRES_AT):
        conn.execute(statement)


def _migrate_2(conn: sqlite3.Connection) -> None:
    """Version 2: a job's input in a column of its own, written once at insert (moved there from ``data``)."""
    conn.execute("alter table jobs add column input text")
    rows = conn.execute("select id, data from jobs").fetchall()
    for job_id, text in rows:
        data = json.loads(text)
        value = data.pop("input", None)
        conn.execute(
            "update jobs set input = ?, data = ? where id = ?",
            (json.dumps(value, separators=(",", ":")), json.dumps(data, separators=(",", ":")), job_id),
        )


def _migrate_3(conn: sqlite3.Connection) -> None:
    """Version 3: the name of the key that submitted a job, in a column of its own, written once at insert (jobs of
    earlier versions have none)."""
    conn.execute("alter table jobs add column submitted_by text")


CREATE_SCHEDULE_RUNS = """
create table if not exists schedule_runs (
    seq integer primary key autoincrement,
    endpoint text not null,
    cron text not null,
    due real not null,
    outcome text not null,
    recorded_at real not null,
    job_id text,
    detail text not null,
    count integer not null
)
"""
CREATE_SCHEDULE_RUNS_ENDPOINT = "create index if not exists schedule_runs_endpoint on schedule_runs (endpoint, seq)"


def _migrate_4(conn: sqlite3.Connection) -> None:
    """Version 4: schedules' histories (``store/runs.py``, decision 0109)."""
    conn.execute(CREATE_SCHEDULE_RUNS)
    conn.execute(CREATE_SCHEDULE_RUNS_ENDPOINT)


#: the cell a usage row is keyed by (``store/usage.py``)
_USAGE_CELL = "start, span, endpoint, app, env, key, model, kind"
CREATE_USAGE = f"""
create table if not exists usage (
    start real not null,
    span real not null,
    endpoint text not null,
    app text not null,
    env text not null,
    key text not null,
    model text not null,
    kind text not null,
    gpu_s real not null,
    vcpu_s real not null,
    memory_mb_s real not null,
    first real not null,
    last real not null,
    primary key ({_USAGE_CELL})
)
"""


def _migrate_5(conn: sqlite3.Connection) -> None:
    """Version 5: workers' device time in time buckets (``store/usage.py``, decision 0112)."""
    conn.execute(CREATE_USAGE)


#: MIGRATIONS[n - 1] takes a file from schema version n - 1 to n; the version lives in ``PRAGMA user_version``
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _migrate_1,
    _migrate_2,
    _migrate_3,
    _migrate_4,
    _migrate_5,
)
#: the schema version this code writes
SCHEMA_VERSION = len(MIGRATIONS)

#: the columns beside ``data``, in the order ``_to_row`` returns them; ``input`` and ``submitted_by`` are written by
#: ``add`` only (neither ever changes)
COLUMNS = ("id", "endpoint", "status", "created_at", "expires_at")
_SELECT = "select id, endpoint, status, created_at, data, input, submitted_by from jobs"
_INSERT = (
    "insert into jobs (id, endpoint, status, created_at, expires_at, data, input, submitted_by) "
    "values (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE = "update jobs set endpoint = ?, status = ?, created_at = ?, expires_at = ?, data = ? where id = ?"
_UNFINISHED = tuple(status.value for status in JobStatus if status not in TERMINAL)
_RUN_COLUMNS = "endpoint, cron, due, outcome, recorded_at, job_id, detail, count"
#: an endpoint's lines older than its newest MAX_RUNS_KEPT (the index on (endpoint, seq) finds the cut)
_PRUNE_RUNS = (
    "delete from schedule_runs where endpoint = ? and seq <= "
    "(select seq from schedule_runs where endpoint = ? order by seq desc limit 1 offset ?)"
)

#: Job fields kept in ``data`` as JSON gives them back (the others need a type restored)
_PLAIN = (
    "extra",
    "started_at",
    "finished_at",
    "worker_id",
    "output",
    "output_binary",
    "retries",
    "execution_timeout_ms",
    "ttl_ms",
    "low_priority",
    "gpu_memory_peak_mb",
    "gpu_utilization_mean_pct",
    "cold_start",
)
_LISTS = ("logs", "chunks", "attempts")

Row = tuple[str, str, str, float, float, str]
_USAGE_COLUMNS = f"{_USAGE_CELL}, gpu_s, vcpu_s, memory_mb_s, first, last"
#: a usage row added to the one of its cell: amounts summed, the use's span widened
_ADD_USAGE = (
    f"insert into usage ({_USAGE_COLUMNS}) values ({', '.join('?' * 13)}) "
    f"on conflict ({_USAGE_CELL}) do update set gpu_s = gpu_s + excluded.gpu_s, vcpu_s = vcpu_s + excluded.vcpu_s, "
    "memory_mb_s = memory_mb_s + excluded.memory_mb_s, first = min(first, excluded.first), "
    "last = max(last, excluded.last)"
)
#: the rows shorter than :span that start before :before, as :span-long ones (``usage.fold``)
_FOLD_USAGE = (
    f"insert into usage ({_USAGE_COLUMNS}) "
    "select cast(start / :span as integer) * :span as bucket, :span, endpoint, app, env, key, model, kind, "
    "sum(gpu_s), sum(vcpu_s), sum(memory_mb_s), min(first), max(last) from usage "
    "where span < :span and start < :before group by bucket, endpoint, app, env, key, model, kind "
    f"on conflict ({_USAGE_CELL}) do update set gpu_s = gpu_s + excluded.gpu_s, vcpu_s = vcpu_s + excluded.vcpu_s, "
    "memory_mb_s = memory_mb_s + excluded.memory_mb_s, first = min(first, excluded.first), "
    "last = max(last, excluded.last)"
)


def _json(job: Job, value: Any) -> str:
    try:
        # ensure_ascii (the default) keeps lone surrogates, which strict UTF-8 text columns would refuse
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StoreError(
            f"job {job.id!r} cannot be stored: {exc}; a job's input, output, extra, logs and chunks must be JSON "
            "(flashpoint.wire.codec wraps other values in its binary envelope)"
        ) from None


def _to_row(job: Job) -> Row:
    """The column values of a job: ``COLUMNS`` then ``data``, the JSON of every other field but the input.

    The input never changes and may be the largest part of the record: it has its own column, written once by
    ``add`` (so neither a second copy in memory nor a new encoding on every change is needed).
    """
    data: dict[str, Any] = {
        "reason": job.reason.value if job.reason is not None else None,
        "placement": None
        if job.placement is None
        else {
            "node": job.placement.node,
            "gpu_model": job.placement.gpu_model,
            "device_ids": list(job.placement.device_ids),
            "simulated": job.placement.simulated,
            "cpu_instance": job.placement.cpu_instance,
            "cores": list(job.placement.cores),
        },
        "error": None
        if job.error is None
        else {"type": job.error.type, "message": job.error.message, "traceback": job.error.traceback},
    }
    for name in _PLAIN + _LISTS:
        data[name] = getattr(job, name)
    return job.id, job.endpoint, job.status.value, job.created_at, job.expires_at, _json(job, data)


def _from_row(row: Sequence[Any]) -> Job:
    """The inverse of ``_to_row`` for a ``_SELECT`` row: ``(id, endpoint, status, created_at, data, input,
    submitted_by)``."""
    job_id, endpoint, status, created_at, text, input_text, submitted_by = row
    data = json.loads(text)
    # a key missing from ``data`` takes the Job default, so a later version may add fields without a migration
    fields: dict[str, Any] = {name: data[name] for name in _PLAIN if name in data}
    fields.update({name: list(data[name]) for name in _LISTS if name in data})
    if "stream" in data:  # the name pending chunks had before 2026-12 (the same record)
        fields["chunks"] = list(data["stream"])
    if data.get("reason") is not None:
        fields["reason"] = Reason(data["reason"])
    if (placement := data.get("placement")) is not None:
        fields["placement"] = Placement(
            placement["node"],
            placement["gpu_model"],
            tuple(placement["device_ids"]),
            placement["simulated"],
            placement.get("cpu_instance"),  # absent in records written before CPU placements were recorded
            tuple(placement.get("cores", ())),
        )
    if (error := data.get("error")) is not None:
        fields["error"] = JobError(error["type"], error["message"], error.get("traceback", ""))
    return Job(
        id=job_id,
        endpoint=endpoint,
        input=json.loads(input_text),
        status=JobStatus(status),
        created_at=created_at,
        size=len(input_text or ""),
        submitted_by=submitted_by,
        **fields,
    )


def _run(row: Sequence[Any]) -> ScheduleRun:
    endpoint, cron, due, outcome, recorded_at, job_id, detail, count = row
    return ScheduleRun(endpoint, cron, due, Outcome(outcome), recorded_at, job_id, detail, count)


class SQLiteJobStore:
    """Job records in a SQLite file: a job accepted is a job kept, across crashes and restarts.

    Durability: WAL with ``synchronous=NORMAL``, and every verb is one autocommitted statement, so a call that
    returned survives ``kill -9`` of this process (the WAL is replayed on the next open). Power loss or an OS crash
    may lose the last transactions before a checkpoint (NORMAL does not fsync each commit); the file stays consistent.

    Object identity: the control plane mutates the Job it got from ``add``/``get`` and then calls ``update(job)``,
    as with MemoryJobStore, whose ``get`` always returns the same object. So this store keeps an identity map of the
    unfinished jobs it was given or handed out: ``get``, ``list``, ``unfinished`` and ``expired`` return those very
    objects (SQL is read only on a miss). A terminal ``update`` drops the job from the map: terminal jobs are read
    from the file, a new object on each read, and a change to one is kept only if it is passed to ``update``.
    ``delete`` removes a job from both. Fields changed without ``update`` (a log line) reach the file with the
    job's next ``update``. Only one store (one control plane) should write a file; other processes may read it.

    Values travel as JSON: input, output and extra come back as JSON gives them (lists for tuples, string keys).

    One connection serves every thread, guarded by a lock; each call is short and synchronous. Writes are grouped:
    they join one open transaction that ``flush()`` commits, so a write is durable once the next ``flush()``
    returns. The control plane flushes once per event-loop iteration, and answers nobody before that.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_s: float = 5.0) -> None:
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._live: dict[str, Job] = {}
        self._conn: sqlite3.Connection | None = self._open(busy_timeout_s)
        #: writes since the last flush() share one transaction (group commit)
        self._in_transaction = False

    def _open(self, busy_timeout_s: float) -> sqlite3.Connection:
        if self.path != ":memory:":
            # every job's input and output: only this user may read them (flashpoint/private.py)
            path = Path(self.path)
            try:
                private_dir(path.parent, ours=path.parent.name == STATE_DIR_NAME)
            except OSError as exc:
                raise StoreError(f"cannot create the directory of the job store {self.path}: {exc}") from None
            try:
                for companion in (Path(f"{path}-wal"), Path(f"{path}-shm")):
                    if companion.exists():
                        private_file(companion)
                private_file(path)  # before SQLite makes it: its -wal and -shm then take its mode
            except OSError as exc:
                raise StoreError(
                    f"cannot create the job store {self.path}: {exc}; check that the path names a file in a directory "
                    "this process can write"
                ) from None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._open_error(exc) from None
        try:
            conn.execute(f"pragma busy_timeout = {max(0, int(busy_timeout_s * 1000))}")
            conn.execute("pragma journal_mode = wal")
            conn.execute("pragma synchronous = normal")
            self._migrate(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise self._open_error(exc) from None
            raise
        return conn

    def _open_error(self, exc: sqlite3.Error) -> StoreError:
        if "not a database" in str(exc):
            hint = "the file is not a SQLite database or is corrupt: move it aside or choose another path"
        else:
            hint = "check that the path names a file in a directory this process can write"
        return StoreError(f"cannot open the job store {self.path}: {exc}; {hint}")

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # an immediate transaction: two processes opening a new file at once do not both create the schema
        conn.execute("begin immediate")
        try:
            version = conn.execute("pragma user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the job store {self.path} has schema version {version}, newer than this flashpoint knows "
                    f"({SCHEMA_VERSION}); upgrade flashpoint or choose another path"
                )
            for number in range(version + 1, SCHEMA_VERSION + 1):
                MIGRATIONS[number - 1](conn)
                conn.execute(f"pragma user_version = {number}")
            conn.execute("commit")
        except BaseException:
            if conn.in_transaction:
                conn.execute("rollback")
            raise

    # ----------------------------------------------------------------------------------------------------------------
    # statements (the caller holds the lock)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the job store {self.path} is closed")
        return self._conn

    def _fetch(self, what: str, sql: str, params: Sequence[Any] = ()) -> builtins.list[Any]:
        conn = self._connection()
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"job store {self.path}: cannot {what}: {exc}") from exc

    def _writer(self) -> sqlite3.Connection:
        """The connection, inside the open write transaction (begun by the first write after a flush)."""
        conn = self._connection()
        if not self._in_transaction:
            try:
                conn.execute("begin")
            except sqlite3.Error as exc:
                raise StoreError(f"job store {self.path}: cannot begin a transaction: {exc}") from exc
            self._in_transaction = True
        return conn

    def _change(self, what: str, sql: str, params: Sequence[Any] | dict[str, Any]) -> int:
        conn = self._writer()
        try:
            return conn.execute(sql, params).rowcount
        except sqlite3.Error as exc:
            raise StoreError(f"job store {self.path}: cannot {what}: {exc}") from exc

    def _jobs(self, rows: builtins.list[Any]) -> builtins.list[Job]:
        """Jobs for rows, the live object where there is one; unfinished jobs read here join the identity map."""
        jobs = []
        for row in rows:
            job = self._live.get(row[0])
            if job is None:
                try:
                    job = _from_row(row)
                except (ValueError, KeyError, TypeError) as exc:
                    raise StoreError(f"job store {self.path}: job {row[0]!r} has an unreadable record: {exc}") from exc
                if not job.status.terminal:
                    self._live[job.id] = job
            jobs.append(job)
        return jobs

    # ----------------------------------------------------------------------------------------------------------------
    # the JobStore verbs

    def add(self, job: Job) -> None:
        row = (*_to_row(job), _json(job, job.input), job.submitted_by)
        with self._lock:
            conn = self._writer()
            try:
                conn.execute(_INSERT, row)
            except sqlite3.IntegrityError:
                raise StoreError(f"job id {job.id!r} already exists") from None
            except sqlite3.Error as exc:
                raise StoreError(f"job store {self.path}: cannot add job {job.id!r}: {exc}") from exc
            if not job.status.terminal:
                self._live[job.id] = job

    def update(self, job: Job) -> None:
        row = _to_row(job)
        with self._lock:
            if not self._change(f"update job {job.id!r}", _UPDATE, (*row[1:], job.id)):
                raise StoreError(f"job store {self.path}: cannot update job {job.id!r}: no such job")
            if job.status.terminal:
                self._live.pop(job.id, None)
            else:
                self._live[job.id] = job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            job = self._live.get(job_id)
            if job is not None:
                return job
            jobs = self._jobs(self._fetch(f"read job {job_id!r}", f"{_SELECT} where id = ?", (job_id,)))
            return jobs[0] if jobs else None

    def list(self, *, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100) -> list[Job]:
        where: builtins.list[str] = []
        params: builtins.list[Any] = []
        if endpoint is not None:
            where.append("endpoint = ?")
            params.append(endpoint)
        if status is not None:
            where.append("status = ?")
            params.append(status.value)
        sql = f"{_SELECT}{' where ' + ' and '.join(where) if where else ''} order by seq desc limit ?"
        with self._lock:
            return self._jobs(self._fetch("list jobs", sql, (*params, limit)))

    def unfinished(self) -> Iterator[Job]:
        sql = f"{_SELECT} where status in ({', '.join('?' * len(_UNFINISHED))}) order by seq"
        with self._lock:
            return iter(self._jobs(self._fetch("list unfinished jobs", sql, _UNFINISHED)))

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._change(f"delete job {job_id!r}", "delete from jobs where id = ?", (job_id,))
            self._live.pop(job_id, None)

    def expired(self, now: float) -> builtins.list[Job]:
        with self._lock:
            return self._jobs(self._fetch("list expired jobs", f"{_SELECT} where expires_at <= ? order by seq", (now,)))

    def add_run(self, run: ScheduleRun) -> None:
        row = (run.endpoint, run.cron, run.due, run.outcome.value, run.recorded_at, run.job_id, run.detail, run.count)
        with self._lock:
            # in the open transaction: a run's line and its job become durable in the same commit
            self._change(
                "record a schedule run",
                f"insert into schedule_runs ({_RUN_COLUMNS}) values ({', '.join('?' * 8)})",
                row,
            )
            self._change("prune a schedule's history", _PRUNE_RUNS, (run.endpoint, run.endpoint, MAX_RUNS_KEPT))

    def runs(self, endpoint: str, *, limit: int = 100) -> builtins.list[ScheduleRun]:
        sql = f"select {_RUN_COLUMNS} from schedule_runs where endpoint = ? order by seq desc limit ?"
        with self._lock:
            return [_run(row) for row in self._fetch("read a schedule's history", sql, (endpoint, limit))]

    def last_run(self, endpoint: str, outcome: Outcome | None = None) -> ScheduleRun | None:
        where, params = (
            ("endpoint = ?", (endpoint,))
            if outcome is None
            else ("endpoint = ? and outcome = ?", (endpoint, outcome.value))
        )
        sql = f"select {_RUN_COLUMNS} from schedule_runs where {where} order by seq desc limit 1"
        with self._lock:
            rows = self._fetch("read a schedule's history", sql, params)
        return _run(rows[0]) if rows else None

    def add_usage(self, records: Iterable[UsageRecord]) -> None:
        rows = [
            (r.start, r.span, r.endpoint, r.app, r.env, r.key, r.model, r.kind)
            + (r.gpu_s, r.vcpu_s, r.memory_mb_s, r.first, r.last)
            for r in records
        ]
        if not rows:
            return
        with self._lock:
            conn = self._writer()  # in the open transaction: durable with the next flush
            try:
                conn.executemany(_ADD_USAGE, rows)
            except sqlite3.Error as exc:
                raise StoreError(f"job store {self.path}: cannot record usage: {exc}") from exc

    def usage(self, since: float = 0.0) -> builtins.list[UsageRecord]:
        sql = f"select {_USAGE_COLUMNS} from usage where start + span > ? order by {_USAGE_CELL}"
        with self._lock:
            return [UsageRecord(*row) for row in self._fetch("read usage", sql, (since,))]

    def fold_usage(self, before: float, span: float) -> None:
        with self._lock:
            self._change("fold usage", _FOLD_USAGE, {"span": span, "before": before})
            self._change("fold usage", "delete from usage where span < ? and start < ?", (span, before))

    def prune_usage(self, before: float) -> None:
        with self._lock:
            self._change("prune usage", "delete from usage where start + span <= ?", (before,))

    def flush(self) -> None:
        """Commit every write since the last flush in one transaction; durable (kill -9) once this returns."""
        with self._lock:
            if not self._in_transaction:
                return
            conn = self._connection()
            try:
                conn.execute("commit")
            except sqlite3.Error as exc:
                raise StoreError(f"job store {self.path}: cannot commit: {exc}") from exc
            finally:
                self._in_transaction = conn.in_transaction

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._live.clear()

    def __repr__(self) -> str:
        return f"SQLiteJobStore({self.path!r})"
