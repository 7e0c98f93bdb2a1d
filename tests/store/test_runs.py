"""Schedules' histories in the job store (``store/runs.py``, decision 0109): the same verbs on the memory and SQLite
stores, newest first, per endpoint, bounded; the SQLite one durable across a reopen, and a schema-3 file upgraded."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flashpoint.store import JobStore, MemoryJobStore, SQLiteJobStore
from flashpoint.store.runs import Outcome, ScheduleRun
from flashpoint.store.sqlite import _migrate_1, _migrate_2, _migrate_3

CRON = "*/5 * * * *"
T0 = 1_800_000_000.0


def run(endpoint: str, n: int, outcome: Outcome = Outcome.SUBMITTED, **fields: Any) -> ScheduleRun:
    job = f"job-{n}" if outcome is Outcome.SUBMITTED else None
    return ScheduleRun(endpoint, CRON, T0 + 300 * n, outcome, T0 + 300 * n + 0.5, job, **fields)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    made: JobStore = MemoryJobStore() if request.param == "memory" else SQLiteJobStore(tmp_path / "jobs.db")
    yield made
    made.close()


def test_runs_are_kept_per_endpoint_newest_first(store: JobStore) -> None:
    for n in range(3):
        store.add_run(run("a", n))
    store.add_run(run("b", 0, Outcome.SKIPPED, detail="previous run still running (job-0)"))
    store.flush()
    assert [r.job_id for r in store.runs("a")] == ["job-2", "job-1", "job-0"]
    assert store.runs("a", limit=2) == [run("a", 2), run("a", 1)]
    assert store.runs("b") == [run("b", 0, Outcome.SKIPPED, detail="previous run still running (job-0)")]
    assert store.runs("nobody") == []


def test_the_last_run_of_an_outcome(store: JobStore) -> None:
    store.add_run(run("a", 0))
    store.add_run(run("a", 1, Outcome.SKIPPED))
    store.add_run(run("a", 2, Outcome.MISSED, count=12, detail="12 fire time(s)"))
    assert store.last_run("a") == run("a", 2, Outcome.MISSED, count=12, detail="12 fire time(s)")
    assert store.last_run("a", Outcome.SUBMITTED) == run("a", 0)
    assert store.last_run("a", Outcome.STOPPED) is None
    assert store.last_run("b") is None


def test_an_endpoint_keeps_its_newest_lines_only(store: JobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # the bound is 1000 lines; five here (a patched constant: the rule, not the number, is under test)
    monkeypatch.setattr("flashpoint.store.memory.MAX_RUNS_KEPT", 5)
    monkeypatch.setattr("flashpoint.store.sqlite.MAX_RUNS_KEPT", 5)
    for n in range(8):
        store.add_run(run("a", n))
        store.add_run(run("b", n))
    assert [r.job_id for r in store.runs("a")] == [f"job-{n}" for n in range(7, 2, -1)]
    assert len(store.runs("b")) == 5


def test_the_history_survives_a_reopen(tmp_path: Path) -> None:
    first = SQLiteJobStore(tmp_path / "jobs.db")
    first.add_run(run("a", 0))
    first.add_run(run("a", 1, Outcome.FAILED, detail="queues full"))
    first.close()
    again = SQLiteJobStore(tmp_path / "jobs.db")
    assert again.runs("a") == [run("a", 1, Outcome.FAILED, detail="queues full"), run("a", 0)]
    again.close()


def test_a_schema_3_file_gets_the_history_table(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for migrate in (_migrate_1, _migrate_2, _migrate_3):
            migrate(conn)
        conn.execute("pragma user_version = 3")
        conn.commit()
    store = SQLiteJobStore(db)
    store.add_run(run("a", 0))
    store.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("pragma user_version").fetchone()[0] >= 4  # and the later tables
        assert conn.execute("select endpoint, job_id, outcome from schedule_runs").fetchall() == [
            ("a", "job-0", "submitted")
        ]


def test_a_line_as_json() -> None:
    assert run("a", 1).to_json() == {
        "endpoint": "a",
        "cron": CRON,
        "due": T0 + 300,
        "outcome": "submitted",
        "recordedAt": T0 + 300.5,
        "jobId": "job-1",
        "detail": "",
        "count": 1,
    }
