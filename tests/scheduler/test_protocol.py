"""The worker protocol's verbs alone (``WorkerProtocol``), on a bare plane state through the test door: a worker's
first request makes it ready, a job is handed to one worker, a result is taken once, a stopping worker's long-polls
are answered at once, and the end of a job is handed back to supervision (``after_job``) with its ``stopPod``."""

from __future__ import annotations

import asyncio

from flashpoint import GpuType
from flashpoint.jobs import BINARY_ENCODING, ENCODING_KEY, Job, JobStatus, Reason
from flashpoint.scheduler.protocol import WorkerProtocol, release_takers, signal_stop
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.scheduler.state import PlaneState
from tests.scheduler.door import add_endpoint, add_worker, plane_state


class Protocol:
    """A ``WorkerProtocol`` on a bare state, recording the callbacks it makes."""

    def __init__(self) -> None:
        self.state: PlaneState = plane_state()
        self.ended: list[tuple[str, bool]] = []
        self.kicks = 0
        self.verbs = WorkerProtocol(
            self.state, take_hold_s=20.0, after_job=self._after_job, kick_if_someone_waits=self._kick
        )
        self.ep: EndpointState = add_endpoint(self.state, name="e", gpu=GpuType.NVIDIA_H200)

    def _after_job(self, worker: Worker, stop_pod: bool) -> None:
        self.ended.append((worker.id, stop_pod))

    def _kick(self) -> None:
        self.kicks += 1

    def queue(self, count: int = 1) -> list[Job]:
        jobs = []
        for _ in range(count):
            job = self.state.book.create(self.ep, {}, None, execution_timeout_ms=None, ttl_ms=None, size=0)
            self.state.book.push(self.ep, job, front=False)
            jobs.append(job)
        return jobs


async def test_a_first_take_makes_a_starting_worker_ready_and_hands_it_queued_jobs_in_order() -> None:
    p = Protocol()
    p.ep.start_failures = 2
    worker = add_worker(p.state, p.ep)
    first, second, third = p.queue(3)
    taken = await p.verbs.take("e", worker.id, 2, hold_s=0)
    assert [job["id"] for job in taken] == [first.id, second.id]
    assert worker.ever_ready and worker.state is WorkerState.RUNNING and p.ep.start_failures == 0
    assert (
        first.status is JobStatus.IN_PROGRESS and first.worker_id == worker.id and worker.jobs == {first.id, second.id}
    )
    assert third.status is JobStatus.IN_QUEUE and p.ep.queued == 1


async def test_a_result_is_taken_once_and_only_from_the_worker_that_ran_the_job() -> None:
    p = Protocol()
    worker, other = add_worker(p.state, p.ep), add_worker(p.state, p.ep)
    (job,) = p.queue()
    await p.verbs.take("e", worker.id, hold_s=0)
    p.verbs.done("e", other.id, job.id, {"output": "forged"})
    assert job.status is JobStatus.IN_PROGRESS
    p.verbs.done("e", worker.id, job.id, {"output": "ok", "stopPod": True})
    p.verbs.done("e", worker.id, job.id, {"output": "late"})
    assert (job.status, job.reason, job.output) == (JobStatus.COMPLETED, Reason.COMPLETED, "ok")
    assert p.ep.counters["completed"] == 1
    # the end of each job goes back to supervision, which decides whether the worker idles or stops
    assert p.ended == [(other.id, False), (worker.id, True), (worker.id, False)]


async def test_an_error_fails_the_job_and_a_binary_output_the_caller_did_not_accept_is_refused() -> None:
    p = Protocol()
    worker = add_worker(p.state, p.ep)
    failing, binary = p.queue(2)
    await p.verbs.take("e", worker.id, 2, hold_s=0)
    p.verbs.done("e", worker.id, failing.id, {"error": "boom"})
    p.verbs.done("e", worker.id, binary.id, {"output": "cGlja2xl", ENCODING_KEY: BINARY_ENCODING})
    assert failing.status is JobStatus.FAILED and failing.error is not None
    assert binary.status is JobStatus.FAILED and binary.reason is Reason.OUTPUT_NOT_SERIALIZABLE


async def test_dispatch_hands_a_queued_job_to_a_worker_waiting_in_its_take_and_skips_a_retiring_one() -> None:
    p = Protocol()
    retiring, waiting = add_worker(p.state, p.ep, WorkerState.IDLE), add_worker(p.state, p.ep, WorkerState.IDLE)
    retiring.retiring = True
    held_retiring = asyncio.ensure_future(p.verbs.take("e", retiring.id, hold_s=60))
    held = asyncio.ensure_future(p.verbs.take("e", waiting.id, hold_s=60))
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(p.ep.takers) == 2
    (job,) = p.queue()
    p.verbs.dispatch(p.ep)
    assert [j["id"] for j in await held] == [job.id] and job.worker_id == waiting.id
    assert not held_retiring.done()  # it waits, and gets nothing new: its stop answers it
    release_takers(p.ep, retiring.id)
    assert await held_retiring == []


async def test_a_stopping_worker_is_answered_at_once_and_an_unknown_one_gets_nothing() -> None:
    p = Protocol()
    stopping = add_worker(p.state, p.ep, WorkerState.STOPPING)
    p.queue()
    assert await p.verbs.take("e", stopping.id, hold_s=60) == []
    assert await p.verbs.take("e", "nobody", hold_s=0) == []
    assert await p.verbs.take("other", stopping.id, hold_s=0) == []  # a worker names its own endpoint only
    assert p.ep.queued == 1


async def test_stop_signals_carry_the_jobs_signalled_and_pings_record_the_jobs_they_leave_out() -> None:
    p = Protocol()
    worker = add_worker(p.state, p.ep)
    first, second = p.queue(2)
    await p.verbs.take("e", worker.id, 2, hold_s=0)
    stops = asyncio.ensure_future(p.verbs.stop_signals("e", worker.id, hold_s=60))
    await asyncio.sleep(0)
    signal_stop(worker, first.id)
    assert await stops == [first.id] and worker.jobs == {second.id}
    p.state.clock.advance(3.0)
    p.verbs.ping("e", worker.id, [])
    assert worker.unnamed == {second.id: p.state.clock.monotonic()}
    p.verbs.ping("e", worker.id, [second.id])
    assert worker.unnamed == {}


async def test_chunks_of_the_running_job_are_kept_for_their_reader() -> None:
    p = Protocol()
    worker = add_worker(p.state, p.ep)
    (job,) = p.queue()
    await p.verbs.take("e", worker.id, hold_s=0)
    p.verbs.chunk("e", worker.id, job.id, {"output": 1})
    p.verbs.chunk("e", "someone-else", job.id, {"output": 2})
    _, chunks = await p.state.book.read_chunks(job.id)
    assert chunks == [{"output": 1}]
