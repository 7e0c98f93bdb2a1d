"""SQLiteJobStore only: WAL, durability across close, processes and kill -9, schema versions, errors, open_store."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flashpoint.errors import ConfigError, StoreError
from flashpoint.jobs import Job, JobError, JobStatus, Placement, Reason
from flashpoint.store import MemoryJobStore, SQLiteJobStore, open_store
from flashpoint.store.sqlite import COLUMNS, SCHEMA_VERSION, _from_row, _migrate_1, _migrate_2, _to_row

S = JobStatus
T0 = 1_700_000_000.0


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "jobs.db"


@pytest.fixture
def open_db(db: Path) -> Iterator[Callable[..., SQLiteJobStore]]:
    """Open stores on ``db`` (several, one after another, as a restarted plane does); all closed at teardown."""
    stores: list[SQLiteJobStore] = []

    def opener(**options: Any) -> SQLiteJobStore:
        store = SQLiteJobStore(db, **options)
        stores.append(store)
        return store

    yield opener
    for store in stores:
        store.close()


def raw(db: Path, sql: str) -> Any:
    """One value read through a separate plain connection (closed again)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchone()[0]


def full_job(n: int, status: JobStatus = S.IN_PROGRESS) -> Job:
    """A job with every field away from its default."""
    return Job(
        id=f"job-{n:04d}",
        endpoint=f"ep-{n % 3}",
        input={"n": n, "text": "héllo", "nested": {"list": [1, 2.5, None, True]}},
        extra={"webhook": "https://example.test/hook", "policy": {"ttl": 7_200_000}},
        status=status,
        reason=Reason.WORKER_LOST if status is S.IN_QUEUE else None,
        created_at=T0 + n + 0.123456789,
        started_at=None if status is S.IN_QUEUE else T0 + n + 1.5,
        worker_id=None if status is S.IN_QUEUE else f"w-{n}",
        placement=None if status is S.IN_QUEUE else Placement("node-a", "NVIDIA H200", (n % 8, 7), simulated=True),
        output={"progress": n / 3},
        error=JobError("KeyError", "'x'", "Traceback ...") if status is S.IN_QUEUE else None,
        retries=1,
        execution_timeout_ms=60_000 + n,
        ttl_ms=7_200_000,
        logs=[f"log {n}", "second line"],
        chunks=[{"token": str(n)}, [1, 2]],
        submitted_by=f"key-{n}",
    )


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=60, check=False
    )


# ------------------------------------------------------------------------------------------------------------------
# the file


def test_opens_in_wal_mode_with_normal_sync_and_busy_timeout(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    store = open_db(busy_timeout_s=2.5)
    assert raw(db, "pragma journal_mode") == "wal"  # WAL is a property of the file
    conn = store._conn  # synchronous and busy_timeout belong to the store's own connection
    assert conn is not None
    assert conn.execute("pragma synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("pragma busy_timeout").fetchone()[0] == 2500


def test_creates_parent_directories_and_schema_version_5(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    assert not db.parent.exists()
    open_db()
    assert db.is_file()
    assert SCHEMA_VERSION == 5
    assert raw(db, "pragma user_version") == 5
    columns = raw(db, "select group_concat(name) from pragma_table_info('jobs')")
    assert columns == "seq,id,endpoint,status,created_at,expires_at,data,input,submitted_by"
    indexes = raw(db, "select group_concat(name) from pragma_index_list('jobs')")
    assert {"jobs_status", "jobs_endpoint_status", "jobs_expires_at"} <= set(indexes.split(","))


def test_reopening_keeps_the_schema_version(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    open_db().close()
    open_db().close()
    assert raw(db, "pragma user_version") == SCHEMA_VERSION


def test_a_file_from_a_newer_version_is_refused(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    open_db().close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("pragma user_version = 99")
    with pytest.raises(StoreError, match=r"schema version 99, newer than this flashpoint knows \(5\)"):
        open_db()


def test_a_version_1_file_is_upgraded_and_its_jobs_keep_their_input(
    open_db: Callable[..., SQLiteJobStore], db: Path
) -> None:
    # Given a file written by schema version 1, whose records hold the input inside ``data``
    db.parent.mkdir(parents=True)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        _migrate_1(conn)
        data = json.dumps({"input": {"n": 1}, "extra": {}, "retries": 0})
        conn.execute(
            "insert into jobs (id, endpoint, status, created_at, expires_at, data) values (?, ?, ?, ?, ?, ?)",
            ("job-old", "ep", "IN_QUEUE", T0, T0 + 60, data),
        )
        conn.execute("pragma user_version = 1")
        conn.commit()
    # When this version opens it, then the input is read from where version 1 put it, and kept through updates
    store = open_db()
    assert raw(db, "pragma user_version") == SCHEMA_VERSION
    job = store.get("job-old")
    assert job is not None and job.input == {"n": 1} and job.submitted_by is None
    job.move(S.IN_PROGRESS)
    store.update(job)
    store.flush()
    store.close()
    again = open_db().get("job-old")
    assert again is not None and again.input == {"n": 1} and again.status is S.IN_PROGRESS


def test_the_input_is_written_once_and_not_kept_twice_in_memory(
    open_db: Callable[..., SQLiteJobStore], db: Path
) -> None:
    store = open_db()
    job = full_job(1, S.IN_QUEUE)
    store.add(job)
    job.move(S.IN_PROGRESS)
    store.update(job)
    store.flush()
    assert json.loads(raw(db, "select input from jobs")) == job.input
    assert "input" not in json.loads(raw(db, "select data from jobs"))  # updates never rewrite it
    # the store keeps no encoded copy of live inputs beside the job objects
    assert not [name for name, value in vars(store).items() if isinstance(value, dict) and name != "_live"]


def test_every_job_field_has_a_place_in_the_row() -> None:
    # Given a job added to Job later: this fails until _to_row/_from_row learn it
    job = full_job(1)
    row = _to_row(job)
    input_text = json.dumps(job.input)
    # the input and the submitter have their own columns, and a job's size is the input column's length
    stored = set(COLUMNS) | set(json.loads(row[-1])) | {"input", "size", "submitted_by"}
    assert stored == {field.name for field in dataclasses.fields(Job)} | {"expires_at"}
    assert _from_row((row[0], row[1], row[2], row[3], row[5], input_text, job.submitted_by)) == dataclasses.replace(
        job, size=len(input_text)
    )


def test_the_submitter_is_written_once_and_read_back(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    store = open_db()
    job = full_job(2, S.IN_QUEUE)
    store.add(job)
    job.move(S.IN_PROGRESS)
    store.update(job)
    store.close()
    assert raw(db, "select submitted_by from jobs") == "key-2"
    again = open_db().get(job.id)
    assert again is not None and again.submitted_by == "key-2"


def test_a_version_2_file_is_upgraded_and_its_jobs_have_no_submitter(
    open_db: Callable[..., SQLiteJobStore], db: Path
) -> None:
    # Given a file of schema version 2 with a job in it
    db.parent.mkdir(parents=True)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        _migrate_1(conn)
        _migrate_2(conn)
        conn.execute(
            "insert into jobs (id, endpoint, status, created_at, expires_at, data, input) values (?, ?, ?, ?, ?, ?, ?)",
            ("job-v2", "ep", "IN_QUEUE", T0, T0 + 60, json.dumps({"extra": {}, "retries": 0}), "{}"),
        )
        conn.execute("pragma user_version = 2")
        conn.commit()
    # When this version opens it, then the column is there and the old job has no submitter
    store = open_db()
    assert raw(db, "pragma user_version") == SCHEMA_VERSION
    job = store.get("job-v2")
    assert job is not None and job.submitted_by is None and job.input == {}


# ------------------------------------------------------------------------------------------------------------------
# durability


def test_reopen_keeps_everything(open_db: Callable[..., SQLiteJobStore]) -> None:
    # Given a store with queued, running and finished jobs, written through updates
    store = open_db()
    jobs = [full_job(n, S.IN_QUEUE) for n in range(6)]
    for job in jobs:
        store.add(job)
    for job in jobs[1::2]:
        job.move(S.IN_PROGRESS)
        job.started_at, job.worker_id = job.created_at + 1, "w-1"
        job.placement = Placement("node-b", None, (), simulated=False)
        store.update(job)
    jobs[3].move(S.COMPLETED)
    jobs[3].reason, jobs[3].finished_at, jobs[3].output = Reason.COMPLETED, T0 + 99, ["done", 1]
    store.update(jobs[3])
    store.delete(jobs[4].id)
    store.close()

    # When the plane restarts
    again = open_db()

    # Then the unfinished jobs come back oldest first, equal in every field, and stay one object each
    unfinished = list(again.unfinished())
    assert unfinished == [jobs[0], jobs[1], jobs[2], jobs[5]]
    assert [job.status for job in unfinished] == [S.IN_QUEUE, S.IN_PROGRESS, S.IN_QUEUE, S.IN_PROGRESS]
    assert all(again.get(job.id) is job for job in unfinished)
    assert again.get(jobs[3].id) == jobs[3]
    assert again.get(jobs[4].id) is None
    assert [job.id for job in again.list()] == [jobs[n].id for n in (5, 3, 2, 1, 0)]
    # and a new submission (here reusing a deleted id) is newer than everything before
    again.add(full_job(4, S.IN_QUEUE))
    assert again.list(limit=1)[0].id == jobs[4].id


def test_an_update_without_a_terminal_state_survives_reopen(open_db: Callable[..., SQLiteJobStore]) -> None:
    store = open_db()
    job = full_job(1, S.IN_QUEUE)
    store.add(job)
    job.move(S.IN_PROGRESS)
    job.logs.append("written with the next update")
    job.retries = 0
    job.ttl_ms = 1000
    store.update(job)
    store.close()
    assert open_db().get(job.id) == job


def test_update_of_an_unknown_or_deleted_job_raises(open_db: Callable[..., SQLiteJobStore]) -> None:
    store = open_db()
    with pytest.raises(StoreError, match=r"cannot update job 'job-0001': no such job"):
        store.update(full_job(1))
    job = full_job(2)
    store.add(job)
    store.delete(job.id)
    with pytest.raises(StoreError, match="no such job"):
        store.update(job)
    assert store.get(job.id) is None


def test_another_process_sees_the_jobs(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    # Given a job added here, with this store still open
    store = open_db()
    store.add(full_job(1))
    store.flush()
    # When another process opens the same file, reads it and adds one
    result = run_python(
        """
        import json, sys
        from flashpoint.jobs import Job
        from flashpoint.store import SQLiteJobStore
        store = SQLiteJobStore(sys.argv[1])
        job = store.get("job-0001")
        store.add(Job(id="from-child", endpoint="ep", input={"seen": job.input, "worker": job.worker_id}))
        store.close()
        print(json.dumps({"status": job.status.value, "placement": list(job.placement.device_ids)}))
        """,
        str(db),
    )
    assert result.returncode == 0, result.stderr
    # Then it saw every field, and its job is visible here
    assert json.loads(result.stdout) == {"status": "IN_PROGRESS", "placement": [1, 7]}
    child = store.get("from-child")
    assert child is not None
    assert child.input == {"seen": full_job(1).input, "worker": "w-1"}
    assert [job.id for job in store.unfinished()] == ["job-0001", "from-child"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_jobs_survive_kill_9(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    # Given a process that adds 500 jobs, starts 100 of them, flushes in between and at the end, then is killed
    # without closing anything, after one more change it never flushed
    result = run_python(
        """
        import os, signal, sys
        from flashpoint.jobs import Job, JobStatus
        from flashpoint.store import SQLiteJobStore
        store = SQLiteJobStore(sys.argv[1])
        for n in range(500):
            store.add(Job(id=f"job-{n:04d}", endpoint="ep", input={"n": n}, created_at=1000.0 + n))
            if n % 50 == 0:
                store.flush()
        for n in range(100):
            job = store.get(f"job-{n:04d}")
            job.move(JobStatus.IN_PROGRESS)
            job.worker_id = "w-1"
            store.update(job)
        store.flush()
        store.add(Job(id="never-flushed", endpoint="ep", input={}, created_at=9999.0))
        os.kill(os.getpid(), signal.SIGKILL)
        """,
        str(db),
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert Path(f"{db}-wal").exists()  # the commits live in the WAL, never checkpointed into the file
    # When the file is opened again
    store = open_db()
    # Then every job is there, in order, with its last update
    unfinished = list(store.unfinished())
    assert [job.id for job in unfinished] == [f"job-{n:04d}" for n in range(500)]
    assert [job.input for job in unfinished] == [{"n": n} for n in range(500)]
    assert [job.status for job in unfinished] == [S.IN_PROGRESS] * 100 + [S.IN_QUEUE] * 400
    assert unfinished[0].worker_id == "w-1"


def test_threads_share_one_store(open_db: Callable[..., SQLiteJobStore]) -> None:
    store = open_db()
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for n in range(50):
                job = Job(id=f"t{t}-{n}", endpoint=f"ep-{t}", input=n)
                store.add(job)
                job.move(S.IN_PROGRESS)
                store.update(job)
                assert store.get(job.id) is job
        except BaseException as exc:  # collected and re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(list(store.unfinished())) == 200
    assert [job.input for job in store.list(endpoint="ep-2")] == list(range(49, -1, -1))


# ------------------------------------------------------------------------------------------------------------------
# errors


def test_a_corrupt_file_is_a_store_error(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"this is not a database\n" * 200)
    with pytest.raises(StoreError, match=r"cannot open the job store .*jobs\.db: file is not a database"):
        SQLiteJobStore(db)


def test_a_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=rf"cannot open the job store {tmp_path}: .*directory this process can write"):
        SQLiteJobStore(tmp_path)


def test_a_path_under_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match=r"cannot create the directory of the job store .*file/sub/jobs\.db"):
        SQLiteJobStore(tmp_path / "file" / "sub" / "jobs.db")


def test_a_value_json_cannot_carry_is_refused_and_the_store_goes_on(open_db: Callable[..., SQLiteJobStore]) -> None:
    store = open_db()
    job = Job(id="odd", endpoint="ep", input={"x": 1})
    store.add(job)
    job.output = object()
    with pytest.raises(StoreError, match=r"job 'odd' cannot be stored: .*must be JSON"):
        store.update(job)
    with pytest.raises(StoreError, match="cannot be stored"):
        store.add(Job(id="odder", endpoint="ep", input={1j: 2}))
    assert store.get("odder") is None
    job.output = "fine"
    store.update(job)
    assert [j.id for j in store.list()] == ["odd"]


def test_an_unreadable_record_names_the_job(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    store = open_db()
    store.add(Job(id="bad", endpoint="ep", input=None, status=S.COMPLETED))
    store.flush()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute('update jobs set data = \'{"reason": "no such reason"}\'')
        conn.commit()
    with pytest.raises(StoreError, match=r"job 'bad' has an unreadable record: 'no such reason' is not a valid"):
        store.get("bad")


def test_pending_chunks_stored_under_their_old_name_are_read(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    # Given a record written before pending chunks were called chunks (its data names them "stream")
    store = open_db()
    store.add(Job(id="old", endpoint="ep", input=None, status=S.IN_PROGRESS))
    store.flush()
    store.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("""update jobs set data = '{"stream": [{"output": 1}]}'""")
        conn.commit()
    # Then the chunks are read back
    job = open_db().get("old")
    assert job is not None and job.chunks == [{"output": 1}]


def test_a_closed_store_says_so(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    store = open_db()
    store.add(Job(id="a", endpoint="ep", input=None))
    store.close()
    store.close()  # twice is fine
    for call in (lambda: store.get("a"), lambda: store.add(Job(id="b", endpoint="ep", input=None)), store.list):
        with pytest.raises(StoreError, match=rf"the job store {db} is closed"):
            call()


# ------------------------------------------------------------------------------------------------------------------
# open_store


@pytest.mark.parametrize("url", [None, "", "memory"])
def test_open_store_memory(url: str | None) -> None:
    store = open_store(url)
    assert isinstance(store, MemoryJobStore)
    store.close()


def test_open_store_paths_and_sqlite_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the OS, mocked: relative paths resolve under tmp_path
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    forms = {
        str(tmp_path / "plain.db"): tmp_path / "plain.db",
        "relative/plain.db": tmp_path / "relative" / "plain.db",
        "sqlite:///rel.db": tmp_path / "rel.db",
        f"sqlite:///{tmp_path}/abs.db": tmp_path / "abs.db",  # sqlite://// + absolute path
        "SQLITE:///upper.db": tmp_path / "upper.db",
        "~/home.db": tmp_path / "home" / "home.db",
    }
    for url, path in forms.items():
        store = open_store(url)
        try:
            assert isinstance(store, SQLiteJobStore), url
            store.add(Job(id="x", endpoint="ep", input=None))
        finally:
            store.close()
        assert path.is_file(), url
    store = open_store(tmp_path / "pathlike.db")
    store.close()
    assert (tmp_path / "pathlike.db").is_file()


@pytest.mark.parametrize("url", ["postgres://localhost/jobs", "redis://x", "sqlite://", "sqlite:///", "file:///x.db"])
def test_open_store_refuses_other_urls(url: str) -> None:
    with pytest.raises(ConfigError, match=r"use 'memory' \(the default\), 'sqlite:///relative/path.db', .* file path"):
        open_store(url)


def test_writes_are_grouped_until_flush(open_db: Callable[..., SQLiteJobStore], db: Path) -> None:
    # Given two writes in one open transaction
    store = open_db()
    store.add(Job(id="a", endpoint="ep", input=None))
    store.add(Job(id="b", endpoint="ep", input=None))
    # Then another connection sees nothing before the flush, and both after it
    with contextlib.closing(sqlite3.connect(db)) as other:
        assert other.execute("select count(*) from jobs").fetchone()[0] == 0
        store.flush()
        assert other.execute("select count(*) from jobs").fetchone()[0] == 2
    store.flush()  # nothing pending: a no-op
