"""Usage rows in the job store (``store/usage.py``, decision 0112): the same verbs in both stores (add adds to a cell,
reads from a time, folds minutes into hours, prunes), SQLite's kept across a close and a kill of the writer's
transaction, and a restarted plane on the same SQLite file reporting the usage of the plane before it."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashpoint import GpuType
from flashpoint.store import JobStore, MemoryJobStore, SQLiteJobStore
from flashpoint.store.usage import UsageRecord, fold, merge
from tests.scheduler.door import open_door

pytestmark = pytest.mark.timeout(30)

T0 = 1_800_000_000.0


def rec(start: float, gpu: float, *, span: float = 60.0, key: str = "", kind: str = "idle", first: float | None = None,
        last: float | None = None, endpoint: str = "shop.prod.embed") -> UsageRecord:  # fmt: skip
    begin = start if first is None else first
    return UsageRecord(start, span, endpoint, "shop", "prod", key, "NVIDIA H200", kind, gpu, 0.0, 0.0, begin,
                       begin + gpu if last is None else last)  # fmt: skip


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    opened: JobStore = MemoryJobStore() if request.param == "memory" else SQLiteJobStore(tmp_path / "jobs.db")
    yield opened
    opened.close()


def test_add_adds_to_the_row_of_its_cell(store: JobStore) -> None:
    store.add_usage([rec(T0, 10, first=T0 + 5), rec(T0, 20, first=T0 + 30, last=T0 + 50)])
    store.add_usage([rec(T0, 1, kind="busy", key="alice"), rec(T0 + 60, 4)])
    store.add_usage([])
    store.flush()
    assert store.usage() == [  # in cell order
        rec(T0, 30, first=T0 + 5, last=T0 + 50),
        rec(T0, 1, kind="busy", key="alice"),
        rec(T0 + 60, 4),
    ]
    assert [r.start for r in store.usage(since=T0 + 60)] == [T0 + 60]  # buckets that end after since
    assert store.usage(since=T0 + 120) == []


def test_fold_merges_old_minutes_into_their_hours_and_prune_forgets(store: JobStore) -> None:
    hour = T0  # T0 is a whole hour
    store.add_usage([rec(hour, 10), rec(hour + 600, 5, first=hour + 600), rec(hour + 3600, 7)])
    store.fold_usage(hour + 3600, 3600.0)
    store.flush()
    assert sorted(store.usage(), key=lambda r: r.cell) == [
        rec(hour, 15, span=3600.0, first=hour, last=hour + 605),
        rec(hour + 3600, 7),
    ]
    store.prune_usage(hour + 3600)
    store.flush()
    assert store.usage() == [rec(hour + 3600, 7)]


def test_the_pure_fold_and_merge() -> None:
    a, b = rec(T0, 10), rec(T0 + 60, 5)
    assert merge(a, rec(T0, 2, first=T0 + 50, last=T0 + 52)).gpu_s == 12
    assert fold([a, b], T0 + 3600, 3600.0) == [rec(T0, 15, span=3600.0, first=T0, last=T0 + 65)]
    assert fold([a, b], T0, 3600.0) == [a, b]  # nothing starts before T0: nothing folded


def test_sqlite_keeps_usage_across_a_reopen_and_drops_what_was_never_flushed(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    first = SQLiteJobStore(db)
    first.add_usage([rec(T0, 10)])
    first.flush()
    first.add_usage([rec(T0, 99)])  # not flushed: the writer dies before its commit
    first._conn.close()  # type: ignore[union-attr]  # as kill -9 would: the open transaction is lost
    again = SQLiteJobStore(db)
    assert again.usage() == [rec(T0, 10)]
    again.close()
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("select count(*) from usage").fetchone()[0] == 1


async def test_a_restarted_plane_on_the_same_file_reports_the_usage_before_it(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    store = SQLiteJobStore(db)
    door = await open_door(store=store)
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    worker = door.worker("embed")
    await door.pull(worker)
    job = door.submit("embed", extra={"flashpoint": {"submitted_by": "alice"}}).id
    await door.pull(worker)
    await door.step(30)
    await door.finish(worker, job)
    await door.step(15)  # idle 15 s; a flush on the way (every 10 s of the clock)
    await door.step(3)
    assert door.plane.usage.gpu_seconds(since=opened) == 48
    await door.plane.close()  # flushes the last 8 s too
    store.close()

    again = SQLiteJobStore(db)
    door = await open_door(store=again)  # a new plane on the same file (its fake clock starts where the old one did)
    door.clock.advance(1000)
    usage = door.plane.usage
    assert usage.gpu_seconds(since=opened) == 48
    assert usage.gpu_seconds(key="alice", since=opened) == 30
    assert usage.gpu_seconds(app="", since=opened) == 48
    assert usage.gpu_seconds(since=opened + 30) == 18
    totals = usage.lifetime()
    assert sum(v[0] for v in totals.values()) == 48
    await door.plane.close()
    again.close()


async def test_a_plane_that_dies_loses_only_what_accrued_since_its_last_flush(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    store = SQLiteJobStore(db)
    door = await open_door(store=store)
    opened = door.clock.time()
    door.endpoint(name="embed", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.step()
    await door.pull(door.worker("embed"))
    await door.step(12)  # flushed at 12 s (the first flush is due 10 s after the plane was built) ...
    await door.plane.committed()  # ... and committed
    await door.step(5)  # 5 s more, never flushed: the plane dies now (no close, no last flush), its store unclosed

    again = SQLiteJobStore(db)
    door = await open_door(store=again)
    door.clock.advance(1000)
    assert door.plane.usage.gpu_seconds(since=opened) == 12  # the open interval ended at the last flush
    await door.plane.close()
    again.close()
