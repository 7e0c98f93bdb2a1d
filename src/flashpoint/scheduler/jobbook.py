"""The job book: every job's record (through the store), the queue of each endpoint with the plane's caps, the
moves a job makes (queued, taken, retried, ended), and who waits for its end or its chunks.

It knows nothing of workers: the plane decides who runs what, and tells the book. Invariants:
- a queue holds job ids in order, low-priority jobs (``Job.low_priority``) in a second one taken only once the first
  is empty; an id whose job left the queue (cancelled, purged, timed out) stays until it is
  reached and is then skipped, so ending a queued job is O(1), while ``ep.queued`` and the plane's totals count only
  jobs still queued;
- a job's end is written, then told to its waiters and listeners only after the commit that holds it
  (``GroupCommit.after_commit``).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Callable
from typing import Any

from flashpoint.clock import Clock
from flashpoint.errors import NotFoundError, QueueFullError
from flashpoint.jobs import DEFAULT_TTL_MS, Job, JobError, JobStatus, JobView, Placement, Reason
from flashpoint.scheduler.commit import GroupCommit
from flashpoint.scheduler.records import EndpointState
from flashpoint.scheduler.waiters import Waiters, settle_after
from flashpoint.store.base import JobStore

#: default caps of the queues, all endpoints together (``serve --max-queued-jobs`` / ``--max-queued-mb``)
MAX_QUEUED_JOBS = 100_000
MAX_QUEUED_BYTES = 1024 * 1024 * 1024
#: job ids are ours: 24 hex characters and "-fp"; anything else names no job (and never reaches the store)
JOB_ID = re.compile(r"[0-9a-f]{24}-fp")

_REASON_TEXT = {
    Reason.CANCELLED: "cancelled before it finished",
    Reason.SHUTDOWN: "the control plane shut down before the job finished",
    Reason.PURGED: "removed from the queue by purge-queue",
    Reason.QUEUE_TTL_EXPIRED: "waited in the queue past its TTL",
    Reason.TTL_EXPIRED: "still running when its TTL ran out",
}


class JobBook:
    def __init__(
        self,
        store: JobStore,
        clock: Clock,
        *,
        max_queued_jobs: int = MAX_QUEUED_JOBS,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        self.store = store
        self.clock = clock
        self.commits = GroupCommit(store)
        self.waiters = Waiters()
        self.max_queued_jobs = max_queued_jobs
        self.max_queued_bytes = max_queued_bytes
        #: jobs waiting in every queue, and the bytes of their input's JSON (as received over HTTP)
        self.queued_jobs = 0
        self.queued_bytes = 0

    # records

    def get(self, job_id: str) -> Job:
        job = self.find(job_id)
        if job is None:
            raise NotFoundError(f"no job with id {job_id!r}")
        return job

    def find(self, job_id: str) -> Job | None:
        return self.store.get(job_id) if JOB_ID.fullmatch(job_id) else None

    def save(self, job: Job) -> None:
        self.commits.save(job)

    def create(
        self,
        ep: EndpointState,
        payload: Any,
        extra: dict[str, Any] | None,
        *,
        execution_timeout_ms: int | None,
        ttl_ms: int | None,
        size: int,
    ) -> Job:
        """A new job of ``ep``, stored (not yet queued); QueueFullError past the caps."""
        if self.queued_jobs >= self.max_queued_jobs or self.queued_bytes + size > self.max_queued_bytes:
            raise QueueFullError(
                f"the control plane holds {self.queued_jobs} queued job(s) with {self.queued_bytes} bytes of input, "
                f"at its limit of {self.max_queued_jobs} jobs and {self.max_queued_bytes} bytes; retry later, "
                "or raise the limit (flashpoint serve --max-queued-jobs / --max-queued-mb)"
            )
        spec = ep.spec
        job = Job(
            id=f"{secrets.token_hex(12)}-fp",
            endpoint=spec.key,
            input=payload,
            extra=dict(extra or {}),
            created_at=self.clock.time(),
            execution_timeout_ms=spec.execution_timeout_ms if execution_timeout_ms is None else execution_timeout_ms,
            ttl_ms=DEFAULT_TTL_MS if ttl_ms is None else ttl_ms,
            size=size,
        )
        self.store.add(job)
        self.commits.soon()
        return job

    # queues

    def push(self, ep: EndpointState, job: Job, *, front: bool) -> None:
        queue = ep.low_queue if job.low_priority else ep.queue
        if front:
            queue.appendleft(job.id)
        else:
            queue.append(job.id)
        self.count(ep, job, +1)

    def count(self, ep: EndpointState, job: Job, change: int) -> None:
        """Count a job into (+1) or out of (-1) its endpoint's queue and the plane's totals."""
        ep.queued += change
        if job.low_priority:
            ep.queued_low += change
        self.queued_jobs += change
        self.queued_bytes += change * job.size

    def pop(self, ep: EndpointState, limit: int) -> list[Job]:
        """Up to ``limit`` jobs from the front of the queue, then of the low-priority one (counted out of it; still
        IN_QUEUE until taken)."""
        jobs: list[Job] = []
        for queue in (ep.queue, ep.low_queue):
            while queue and len(jobs) < limit:
                job = self.store.get(queue.popleft())
                if job is None or job.status is not JobStatus.IN_QUEUE:
                    continue  # left the queue earlier: skipped now
                self.count(ep, job, -1)
                jobs.append(job)
        return jobs

    def queued(self, ep: EndpointState) -> list[Job]:
        """The endpoint's jobs still queued, in the order they will be taken."""
        found = (self.store.get(job_id) for job_id in (*ep.queue, *ep.low_queue))
        return [job for job in found if job is not None and job.status is JobStatus.IN_QUEUE]

    def oldest(self, ep: EndpointState, *, low: bool = True) -> float | None:
        """Wall time at which the oldest job still queued for ``ep`` was queued (the first to be taken: a normal
        job's while there is one); ``low=False``: normal jobs only."""
        for queue in (ep.queue, ep.low_queue) if low else (ep.queue,):
            for job_id in queue:
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_QUEUE:
                    return job.created_at
        return None

    def position(self, ep: EndpointState, job: Job) -> int:
        """1-based place of a queued job among its endpoint's queued jobs, in the order they will be taken."""
        position = 0
        for job_id in (*ep.queue, *ep.low_queue):
            other = self.store.get(job_id)
            if other is not None and other.status is JobStatus.IN_QUEUE:
                position += 1
            if job_id == job.id:
                break
        return position

    # moves

    def taken(self, job: Job, worker_id: str, placement: Placement) -> None:
        job.move(JobStatus.IN_PROGRESS)
        job.reason = None  # a preempted job's queued reason is over
        job.started_at = self.clock.time()
        job.worker_id = worker_id
        job.placement = placement
        self.save(job)

    def back_to_queue(self, job: Job, *, retried: bool, outcome: Reason = Reason.WORKER_LOST) -> None:
        """A running job goes back to the queue (its worker is gone): ``retried`` counts it against the retry rule.
        The run that ended is kept in ``attempts`` with its ``outcome``; a preempted job waits with reason
        ``preempted`` (a queued job's reason says why it is queued again)."""
        job.attempts.append(
            {
                "workerId": job.worker_id,
                "placement": job.placement.to_json() if job.placement is not None else None,
                "startedAt": job.started_at,
                "endedAt": self.clock.time(),
                "outcome": outcome.value,
            }
        )
        job.move(JobStatus.IN_QUEUE)
        if retried:
            job.retries += 1
        job.reason = Reason.PREEMPTED if outcome is Reason.PREEMPTED else None
        job.worker_id, job.placement, job.started_at = None, None, None
        self.save(job)

    def reset(self, job: Job) -> None:
        """A FAILED or TIMED_OUT job starts over (``/retry``): same id, no output, no error."""
        job.move(JobStatus.IN_QUEUE)
        job.reason = None
        job.output, job.output_binary, job.error = None, False, None
        job.worker_id, job.placement = None, None
        job.started_at, job.finished_at = None, None
        job.chunks = []
        self.save(job)

    def finish(
        self,
        job: Job,
        status: JobStatus,
        reason: Reason,
        error: JobError | None = None,
        counters: dict[str, int] | None = None,
    ) -> None:
        """End a job: written now, heard of by its waiters and the listeners once that is durable."""
        job.move(status)
        job.reason = reason
        job.finished_at = self.clock.time()
        if error is not None:
            job.error = error
        if job.error is None and reason in _REASON_TEXT:
            job.error = JobError(status.value.title().replace("_", ""), _REASON_TEXT[reason])
        if counters is not None:
            if status is JobStatus.COMPLETED:
                counters["completed"] += 1
            elif status is JobStatus.FAILED:
                counters["failed"] += 1
        self.save(job)
        self.waiters.chunk_arrived(job.id)
        notify = self.waiters.take_ended(job.id)
        if notify is not None:
            view = job.view()
            # nobody hears of the end before it is durable: a restart could otherwise run it (and end it) again
            self.commits.after_commit(lambda: notify(view))

    def expired(self, wall: float) -> list[Job]:
        """TTL: the unfinished jobs whose lifetime is over (the plane ends them); finished ones are deleted (404),
        unless someone still waits for them."""
        unfinished = []
        for job in self.store.expired(wall):
            if not job.status.terminal:
                unfinished.append(job)
            elif not self.waiters.waits_for(job.id):
                self.store.delete(job.id)
                self.commits.soon()
        return unfinished

    # who waits

    def on_finish(self, job_id: str, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` once the job is terminal (now, if it already is); returns an unsubscribe."""
        job = self.get(job_id)
        if job.status.terminal:
            callback(job.view())
            return lambda: None
        return self.waiters.on_end(job_id, callback)

    async def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        future: asyncio.Future[JobView] = asyncio.get_running_loop().create_future()

        def resolve(view: JobView) -> None:
            if not future.done():
                future.set_result(view)

        def too_late() -> TimeoutError:
            job = self.store.get(job_id)
            return TimeoutError(f"job {job_id} is still {job.status.value if job else 'unknown'} after {timeout}s")

        unsubscribe = self.on_finish(job_id, resolve)
        timer = settle_after(future, timeout, too_late) if timeout is not None else None
        try:
            return await future
        finally:
            unsubscribe()
            if timer is not None:
                timer.cancel()

    def add_chunk(self, job: Job, chunk: dict[str, Any]) -> None:
        job.chunks.append(chunk)
        self.waiters.chunk_arrived(job.id)

    async def read_chunks(self, job_id: str, wait_s: float = 0.0) -> tuple[JobView, list[Any]]:
        """Chunks not yet read (a destructive read), waiting up to ``wait_s`` for one or for the job to end."""
        job = self.get(job_id)
        if not job.chunks and not job.status.terminal and wait_s > 0:
            await self.waiters.next_chunk(job_id, wait_s)
            job = self.get(job_id)
        chunks, job.chunks = job.chunks, []
        if chunks:
            self.save(job)
        return job.view(), chunks
