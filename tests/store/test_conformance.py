"""One JobStore suite, run against every store: MemoryJobStore and SQLiteJobStore must behave the same.

Covers ``flashpoint.store.base`` (the ``JobStore`` protocol every store meets) for tests/test_layout.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flashpoint.errors import StoreError
from flashpoint.jobs import Job, JobError, JobStatus, Placement, Reason
from flashpoint.store import JobStore, MemoryJobStore, SQLiteJobStore

S = JobStatus
T0 = 1_700_000_000.0


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[JobStore]:
    """Each store, empty; the SQLite file lives in tmp_path. Closed at teardown."""
    opened: JobStore = MemoryJobStore() if request.param == "memory" else SQLiteJobStore(tmp_path / "jobs.db")
    yield opened
    opened.close()


def make_job(n: int, *, endpoint: str = "ep", status: JobStatus = S.IN_QUEUE, **fields: Any) -> Job:
    """A job with a predictable id and a created_at that grows with ``n``."""
    fields.setdefault("created_at", T0 + n)
    return Job(id=f"job-{n:04d}", endpoint=endpoint, input={"n": n}, status=status, **fields)


def finish(store: JobStore, job: Job, status: JobStatus = S.COMPLETED, reason: Reason = Reason.COMPLETED) -> None:
    """Move a job through IN_PROGRESS to a terminal state and write it, as the plane does."""
    if job.status is S.IN_QUEUE:
        job.move(S.IN_PROGRESS)
        store.update(job)
    job.move(status)
    job.reason = reason
    job.finished_at = job.created_at + 2
    store.update(job)


def ids(jobs: Any) -> list[str]:
    return [job.id for job in jobs]


# ------------------------------------------------------------------------------------------------------------------
# add and get


def test_get_returns_the_added_object(store: JobStore) -> None:
    job = make_job(1)
    store.add(job)
    assert store.get(job.id) is job
    assert store.get(job.id) is job


def test_get_unknown_id_is_none(store: JobStore) -> None:
    assert store.get("nope") is None


def test_duplicate_add_raises_and_keeps_the_first(store: JobStore) -> None:
    first = make_job(1)
    store.add(first)
    with pytest.raises(StoreError, match="already exists"):
        store.add(make_job(1, endpoint="other"))
    assert store.get(first.id) is first
    assert ids(store.list()) == [first.id]


def test_the_plane_mutates_the_object_it_got_and_updates_it(store: JobStore) -> None:
    # Given a queued job that the plane looks up again by id
    store.add(make_job(1))
    job = store.get("job-0001")
    assert job is not None
    # When it takes the job and writes it through
    job.move(S.IN_PROGRESS)
    job.worker_id = "w1"
    job.started_at = job.created_at + 1
    store.update(job)
    # Then every later read sees the same object, wherever it comes from
    assert store.get(job.id) is job
    assert store.list()[0] is job
    assert next(store.unfinished()) is job
    assert store.list(status=S.IN_PROGRESS)[0] is job


# ------------------------------------------------------------------------------------------------------------------
# update


def test_update_persists_every_field(store: JobStore) -> None:
    job = make_job(1, extra={"webhook": "https://example.test/hook"})
    store.add(job)
    job.move(S.IN_PROGRESS)
    job.started_at = T0 + 1.25
    job.worker_id = "worker-7"
    job.placement = Placement("node-a", "NVIDIA H200", (0, 3), simulated=True)
    job.execution_timeout_ms = 600_000
    job.ttl_ms = 3_600_000
    job.retries = 1
    job.logs.extend(["loading", "step 1"])
    job.chunks.extend([{"token": "a"}, ["b", 2], None])
    job.extra["policy"] = {"ttl": 3_600_000}
    store.update(job)
    job.move(S.FAILED)
    job.reason = Reason.USER_ERROR
    job.finished_at = T0 + 3.5
    job.output = {"partial": [1.5, None, True, "x"]}
    job.error = JobError("ValueError", "bad input", "Traceback (most recent call last):\n  ...\nValueError")
    store.update(job)

    got = store.get(job.id)  # SQLite reads a terminal job from its file
    assert got == job
    assert got is not None
    assert got.status is S.FAILED and got.reason is Reason.USER_ERROR
    assert got.placement == Placement("node-a", "NVIDIA H200", (0, 3), True)
    assert isinstance(got.placement.device_ids, tuple)
    assert got.error == JobError("ValueError", "bad input", job.error.traceback)
    assert got.expires_at == job.expires_at
    assert got.view() == job.view()


def test_a_cpu_placement_keeps_its_instance_type_and_cores(store: JobStore) -> None:
    job = make_job(2)
    store.add(job)
    job.move(S.IN_PROGRESS)
    job.placement = Placement("box", None, (), False, cpu_instance="cpu3c-2-4", cores=(2, 3))
    store.update(job)
    job.move(S.COMPLETED)
    job.finished_at = T0 + 2.0
    store.update(job)

    got = store.get(job.id)
    assert got is not None and got.placement == Placement("box", None, (), False, "cpu3c-2-4", (2, 3))
    assert isinstance(got.placement.cores, tuple)


def test_update_to_terminal_and_back_to_the_queue_on_retry(store: JobStore) -> None:
    job = make_job(1)
    store.add(job)
    finish(store, job, S.FAILED, Reason.WORKER_LOST)
    assert ids(store.unfinished()) == []
    failed = store.get(job.id)
    assert failed == job
    assert failed is not None
    failed.move(S.IN_QUEUE)
    failed.retries += 1
    store.update(failed)
    assert store.get(job.id) is failed
    assert list(store.unfinished()) == [failed]
    assert store.list(status=S.IN_QUEUE) == [failed]
    assert store.list(status=S.FAILED) == []


# ------------------------------------------------------------------------------------------------------------------
# list


def test_list_is_newest_first_with_filters_and_limit(store: JobStore) -> None:
    jobs = [make_job(n, endpoint="a" if n % 2 else "b") for n in range(6)]
    for job in jobs:
        store.add(job)
    finish(store, jobs[1])
    finish(store, jobs[4], S.CANCELLED, Reason.CANCELLED)

    assert ids(store.list()) == [f"job-{n:04d}" for n in (5, 4, 3, 2, 1, 0)]
    assert ids(store.list(endpoint="a")) == ["job-0005", "job-0003", "job-0001"]
    assert ids(store.list(status=S.IN_QUEUE)) == ["job-0005", "job-0003", "job-0002", "job-0000"]
    assert ids(store.list(endpoint="a", status=S.COMPLETED)) == ["job-0001"]
    assert ids(store.list(endpoint="b", status=S.CANCELLED)) == ["job-0004"]
    assert store.list(endpoint="b", status=S.TIMED_OUT) == []
    assert store.list(endpoint="nope") == []
    assert ids(store.list(limit=2)) == ["job-0005", "job-0004"]
    assert ids(store.list(endpoint="b", limit=1)) == ["job-0004"]
    assert store.list(limit=0) == []


def test_list_limit_defaults_to_100(store: JobStore) -> None:
    for n in range(105):
        store.add(make_job(n))
    listed = store.list()
    assert len(listed) == 100
    assert listed[0].id == "job-0104" and listed[-1].id == "job-0005"


def test_order_is_submission_order_not_the_clock(store: JobStore) -> None:
    # Given jobs whose created_at runs backwards (the wall clock was stepped back)
    for n in range(3):
        store.add(make_job(n, created_at=T0 - n))
    # Then newest and oldest still mean last and first submitted
    assert ids(store.list()) == ["job-0002", "job-0001", "job-0000"]
    assert ids(store.unfinished()) == ["job-0000", "job-0001", "job-0002"]


# ------------------------------------------------------------------------------------------------------------------
# unfinished


def test_unfinished_is_oldest_first_and_only_unfinished(store: JobStore) -> None:
    jobs = [make_job(n) for n in range(6)]
    for job in jobs:
        store.add(job)
    jobs[2].move(S.IN_PROGRESS)
    store.update(jobs[2])
    finish(store, jobs[0])
    finish(store, jobs[3], S.TIMED_OUT, Reason.EXECUTION_TIMEOUT)
    finish(store, jobs[5], S.FAILED, Reason.USER_ERROR)

    unfinished = list(store.unfinished())
    assert ids(unfinished) == ["job-0001", "job-0002", "job-0004"]
    assert all(got is want for got, want in zip(unfinished, (jobs[1], jobs[2], jobs[4]), strict=True))
    assert [job.status for job in unfinished] == [S.IN_QUEUE, S.IN_PROGRESS, S.IN_QUEUE]


def test_unfinished_of_an_empty_store(store: JobStore) -> None:
    assert list(store.unfinished()) == []


def test_unfinished_is_a_snapshot(store: JobStore) -> None:
    store.add(make_job(1))
    pending = store.unfinished()
    store.add(make_job(2))  # adding while the plane walks the result must not break the walk
    assert ids(pending) == ["job-0001"]


# ------------------------------------------------------------------------------------------------------------------
# delete


def test_delete_forgets_the_job_everywhere(store: JobStore) -> None:
    kept, gone, done = make_job(1), make_job(2), make_job(3)
    for job in (kept, gone, done):
        store.add(job)
    finish(store, done)
    store.delete(gone.id)
    store.delete(done.id)
    assert store.get(gone.id) is None and store.get(done.id) is None
    assert ids(store.list()) == [kept.id]
    assert ids(store.unfinished()) == [kept.id]
    assert ids(store.expired(T0 + 10**9)) == [kept.id]


def test_delete_unknown_id_is_ignored(store: JobStore) -> None:
    store.delete("nope")
    store.add(make_job(1))
    store.delete("job-0001")
    store.delete("job-0001")
    assert store.list() == []


def test_an_id_can_be_added_again_after_delete(store: JobStore) -> None:
    store.add(make_job(1))
    store.add(make_job(2))
    store.delete("job-0001")
    again = make_job(1, endpoint="again")
    store.add(again)
    assert store.get("job-0001") is again
    assert ids(store.list()) == ["job-0001", "job-0002"]  # it is the newest submission now


# ------------------------------------------------------------------------------------------------------------------
# expired


def test_expired_boundaries(store: JobStore) -> None:
    short = make_job(1, created_at=1000.0, ttl_ms=250)  # expires at 1000.25
    long = make_job(2, created_at=1000.0, ttl_ms=5000)  # expires at 1005.0
    store.add(short)
    store.add(long)
    assert store.expired(1000.0) == []
    assert store.expired(1000.2499) == []
    assert ids(store.expired(1000.25)) == [short.id]  # at expires_at counts as expired
    assert ids(store.expired(1004.999)) == [short.id]
    assert ids(store.expired(1005.0)) == [short.id, long.id]
    assert ids(store.expired(1e12)) == [short.id, long.id]


def test_expired_covers_any_status_oldest_first(store: JobStore) -> None:
    jobs = [make_job(n, created_at=1000.0 + n, ttl_ms=1000) for n in range(4)]
    for job in jobs:
        store.add(job)
    finish(store, jobs[0])
    jobs[1].move(S.IN_PROGRESS)
    store.update(jobs[1])
    finish(store, jobs[2], S.CANCELLED, Reason.CANCELLED)
    expired = store.expired(1003.5)  # jobs 0..2 expire at 1001..1003, job 3 at 1004
    assert ids(expired) == ["job-0000", "job-0001", "job-0002"]
    assert [job.status for job in expired] == [S.COMPLETED, S.IN_PROGRESS, S.CANCELLED]
    assert expired[1] is jobs[1]


def test_expired_follows_an_updated_ttl(store: JobStore) -> None:
    job = make_job(1, created_at=1000.0, ttl_ms=1000)
    store.add(job)
    assert ids(store.expired(1001.0)) == [job.id]
    job.ttl_ms = 10_000
    store.update(job)
    assert store.expired(1001.0) == []
    assert ids(store.expired(1010.0)) == [job.id]


# ------------------------------------------------------------------------------------------------------------------
# terminal jobs, payloads


@pytest.mark.parametrize("status", [S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMED_OUT])
def test_terminal_jobs_stay_gettable(store: JobStore, status: JobStatus) -> None:
    job = make_job(1)
    store.add(job)
    job.output = {"answer": 42}
    finish(store, job, status, Reason.COMPLETED if status is S.COMPLETED else Reason.SHUTDOWN)
    assert store.get(job.id) == job
    assert store.get(job.id) == job  # read twice
    assert store.list(status=status) == [job]
    assert list(store.unfinished()) == []


def test_a_terminal_job_can_be_added_directly(store: JobStore) -> None:
    job = make_job(1, status=S.CANCELLED, reason=Reason.CANCELLED, finished_at=T0 + 1)
    store.add(job)
    assert store.get(job.id) == job
    assert list(store.unfinished()) == []


def test_large_payloads_round_trip(store: JobStore) -> None:
    blob = "".join(chr(32 + i % 90) for i in range(256 * 1024))
    job = Job(id="big", endpoint="ep", input={"blob": blob, "numbers": list(range(10_000))})
    store.add(job)
    job.move(S.IN_PROGRESS)
    store.update(job)
    job.output = {"echo": blob[::-1], "floats": [i / 7 for i in range(5_000)]}
    job.logs.extend(f"line {i} " + "x" * 100 for i in range(1000))
    finish(store, job)
    got = store.get("big")
    assert got == job
    assert got is not None and len(got.input["blob"]) == 256 * 1024


def test_unicode_round_trips(store: JobStore) -> None:
    text = "naïve café, 東京, שלום, 🚀👩‍💻, e\u0301, tab\tnul\x00end, lone \ud800 surrogate"
    job = Job(
        id="jöb-🚀-1",
        endpoint="résumé-東京",
        input={"text": text, "ключ": ["ünïcödé", {"😀": "☃"}]},
        extra={"note": text},
    )
    store.add(job)
    job.move(S.IN_PROGRESS)
    job.logs.append(text)
    job.chunks.append({"chunk": text})
    job.worker_id = "wörker-1"
    store.update(job)
    job.output = text
    job.error = JobError("Ошибка", text, text)
    finish(store, job, S.FAILED, Reason.USER_ERROR)
    got = store.get("jöb-🚀-1")
    assert got == job
    assert got is not None and got.input["text"] == text
    assert store.list(endpoint="résumé-東京") == [job]
