"""The job book alone (``JobBook``), on a bare plane state through the test door: queues in order (a job put back goes
first), a job that left its queue skipped when reached and counted out at once, the plane's caps, a job's end told to
its waiters only once it is durable, the TTL sweep, and chunks read once.

Covers ``flashpoint.scheduler.commit`` (group commit) and ``flashpoint.scheduler.waiters`` (waiters) for
tests/test_layout.py."""

from __future__ import annotations

import pytest

from flashpoint import GpuType
from flashpoint.errors import NotFoundError, QueueFullError
from flashpoint.jobs import Job, JobStatus, JobView, Placement, Reason
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.records import EndpointState
from tests.scheduler.door import add_endpoint, plane_state

#: where the book's jobs run
WHERE = Placement("node-a", "NVIDIA H200", (0,), True)


def queued(book: JobBook, ep: EndpointState, count: int, size: int = 0) -> list[Job]:
    jobs = []
    for _ in range(count):
        job = book.create(ep, {}, None, execution_timeout_ms=None, ttl_ms=None, size=size)
        book.push(ep, job, front=False)
        jobs.append(job)
    return jobs


async def test_a_queue_keeps_order_and_a_job_put_back_goes_first() -> None:
    state = plane_state()
    ep, book = add_endpoint(state, name="e", gpu=GpuType.NVIDIA_H200), state.book
    first, second, third = queued(book, ep, 3)
    (taken,) = book.pop(ep, 1)
    assert taken is first and ep.queued == 2 and book.queued_jobs == 2
    book.taken(first, "e-w1", WHERE)
    book.back_to_queue(first, retried=True)
    book.push(ep, first, front=True)
    assert [job.id for job in book.queued(ep)] == [first.id, second.id, third.id] and first.retries == 1
    assert book.position(ep, third) == 3 and first.worker_id is None


async def test_a_job_that_left_its_queue_is_counted_out_at_once_and_skipped_when_reached() -> None:
    state = plane_state()
    ep, book = add_endpoint(state, name="e", gpu=GpuType.NVIDIA_H200), state.book
    first, second = queued(book, ep, 2, size=10)
    book.count(ep, first, -1)
    state.finish(first, JobStatus.CANCELLED, Reason.CANCELLED)
    assert (ep.queued, book.queued_jobs, book.queued_bytes) == (1, 1, 10) and len(ep.queue) == 2
    assert book.position(ep, second) == 1 and book.pop(ep, 5) == [second] and ep.queue == type(ep.queue)()


async def test_the_caps_count_every_queue_in_jobs_and_in_bytes() -> None:
    state = plane_state()
    book = JobBook(state.book.store, state.clock, max_queued_jobs=2, max_queued_bytes=100)
    a = add_endpoint(state, name="a", gpu=GpuType.NVIDIA_H200)
    b = add_endpoint(state, name="b", gpu=GpuType.NVIDIA_H200)
    queued(book, a, 1, size=60)
    with pytest.raises(QueueFullError, match="max-queued"):
        queued(book, b, 1, size=50)  # 110 bytes
    queued(book, b, 1, size=40)
    with pytest.raises(QueueFullError):
        queued(book, a, 1)  # 3 jobs


async def test_a_jobs_end_is_told_to_its_waiters_only_once_it_is_durable() -> None:
    state = plane_state()
    ep, book = add_endpoint(state, name="e", gpu=GpuType.NVIDIA_H200), state.book
    (job,) = queued(book, ep, 1)
    heard: list[JobView] = []
    book.on_finish(job.id, heard.append)
    book.pop(ep, 1)
    book.taken(job, "e-w1", WHERE)
    state.finish(job, JobStatus.COMPLETED, Reason.COMPLETED)
    assert heard == [] and ep.counters["completed"] == 1  # written, not yet committed
    await book.commits.committed()
    assert [view.status for view in heard] == [JobStatus.COMPLETED]
    late: list[JobView] = []
    book.on_finish(job.id, late.append)  # a job already terminal is told at once
    assert len(late) == 1


async def test_the_ttl_sweep_returns_unfinished_jobs_and_deletes_finished_ones() -> None:
    state = plane_state()
    ep, book = add_endpoint(state, name="e", gpu=GpuType.NVIDIA_H200), state.book
    done, waiting = queued(book, ep, 2)
    book.pop(ep, 1)
    book.taken(done, "e-w1", WHERE)
    state.finish(done, JobStatus.COMPLETED, Reason.COMPLETED)
    assert book.expired(state.clock.time() + waiting.ttl_ms / 1000 + 1) == [waiting]
    with pytest.raises(NotFoundError):
        book.get(done.id)
    assert book.find("not-a-job-id") is None


async def test_chunks_are_read_once() -> None:
    state = plane_state()
    ep, book = add_endpoint(state, name="e", gpu=GpuType.NVIDIA_H200), state.book
    (job,) = queued(book, ep, 1)
    book.add_chunk(job, {"output": 1})
    book.add_chunk(job, {"output": 2})
    assert (await book.read_chunks(job.id))[1] == [{"output": 1}, {"output": 2}]
    assert (await book.read_chunks(job.id))[1] == []
