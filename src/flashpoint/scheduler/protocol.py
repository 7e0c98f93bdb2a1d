"""The Runpod worker protocol's verbs, served from the control plane's state: job-take (a long-poll), job-done and
flashpoint's job-done-batch, job-stream, job-stop (a long-poll) and ping (runpod-protocol.md §3).

``WorkerProtocol`` is a collaborator of ``ControlPlane``: it reads and writes the plane's state (the job book, the
endpoints' records, the workers) and hands the transitions it leads to back through the callbacks it is given (a
worker's job ended: ``after_job``, which may stop it; a reconcile); this file holds the protocol's side of the state
machine, and nothing else. Invariants: a worker's first
request makes it ready; a result is taken once (a late or repeated one changes nothing); a job is handed to one
worker; a worker that is stopping has its long-polls answered at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from flashpoint.jobs import BINARY_ENCODING, ENCODING_KEY, Job, JobError, JobStatus, Reason
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.records import EndpointState, Taker, Worker, WorkerState
from flashpoint.scheduler.state import PlaneState
from flashpoint.scheduler.waiters import settle_after, wake
from flashpoint.wire import codec, coldstart, protocol

log = logging.getLogger("flashpoint.plane")


class WorkerProtocol:
    """The worker-facing verbs of the plane, over its ``state``."""

    def __init__(
        self,
        state: PlaneState,
        *,
        take_hold_s: float,
        after_job: Callable[[Worker, bool], None],
        kick_if_someone_waits: Callable[[], None],
        take: Callable[[JobBook, EndpointState, Worker, int], list[Job]] | None = None,
    ) -> None:
        """``take(book, ep, worker, count)``: the jobs a worker is handed from its queue (the plane's quotas:
        ``QuotaGate.take``; None: the front of the queue, ``book.pop``); ``take_hold_s``: how long job-take and
        job-stop hold a request before answering with nothing;
        ``after_job(worker, stop_pod)``: one of the worker's jobs ended (it may go idle, or stop: supervision's rule);
        ``kick_if_someone_waits``: a worker may have devices an endpoint waits for."""
        self._state = state
        # the state's containers never change (only their contents): kept, as the verbs run per job
        self._book = state.book
        self._endpoints = state.endpoints
        self._workers = state.workers
        self._clock = state.clock
        self.take_hold_s = take_hold_s
        self._after_job = after_job
        self._kick_if_someone_waits = kick_if_someone_waits
        self._take = take

    # the verbs

    def _worker(
        self, endpoint: str, worker_id: str, *, exchange: bool = True, phases: str | None = None
    ) -> Worker | None:
        """The worker a request names (None if unknown); its first request makes a starting (queue) worker ready.
        ``exchange``: the request takes jobs or posts results (pings and the job-stop long-poll do not);
        ``phases``: the cold-start phases a flashpoint worker reports on its takes (``wire/coldstart.py``'s header)."""
        worker = self._workers.get(worker_id)
        if worker is None or worker.endpoint != endpoint:
            return None
        now = self._clock.monotonic()
        if exchange:
            worker.last_exchange = now
        if phases and worker.ever_ready:  # a ping made it ready before its first take reported its phases
            worker.phases = coldstart.reported_late(worker.phases, phases)
        if worker.state is WorkerState.STARTING:
            ep = self._endpoints[endpoint]
            if ep.spec.serves_routes:  # a route worker is ready when its /ping says so (routeserving), not before
                return worker
            worker.state = WorkerState.IDLE
            worker.ever_ready = True
            worker.idle_since = now
            ep.start_failures = ep.start_losses = 0
            ep.traffic.cold_start(now - worker.started_at)  # keep-warm's cost of a cold start
            worker.phases = coldstart.ready_phases(worker.phases, now - worker.started_at, phases)
            self._state.usage.observe(worker)
        return worker

    async def take(
        self, endpoint: str, worker_id: str, count: int = 1, hold_s: float | None = None, phases: str | None = None
    ) -> list[dict[str, Any]]:
        """Long-poll: up to ``count`` jobs for this worker, or [] once ``hold_s`` passes (or the worker must stop);
        ``phases``: the cold-start phases the worker reports (``wire/coldstart.py``)."""
        ep = self._endpoints.get(endpoint)
        worker = self._worker(endpoint, worker_id, phases=phases)
        hold = self.take_hold_s if hold_s is None else hold_s
        if ep is None or worker is None:  # unknown: hold anyway, so a misconfigured worker does not spin
            await asyncio.sleep(min(hold, 5.0))
            return []
        if worker.state is WorkerState.STOPPING:  # answered at once: it is about to exit
            return []
        # a retiring (or spent single-use) worker gets nothing new, but waits like any other (its stop answers it),
        # rather than spin
        jobs = self._pop(ep, worker, count) if worker.takes_jobs else []
        if not jobs:
            future: asyncio.Future[list[Job]] = asyncio.get_running_loop().create_future()
            entry: Taker = (worker_id, count, future)
            ep.takers.append(entry)
            self._kick_if_someone_waits()  # an idle, pulling worker may have devices another endpoint waits for
            timer = settle_after(future, hold, list)
            try:
                jobs = await future
            finally:
                timer.cancel()
                if entry in ep.takers:
                    ep.takers.remove(entry)
        return [protocol.job_payload(job.id, job.input, job.extra) for job in jobs]

    def _pop(self, ep: EndpointState, worker: Worker, count: int) -> list[Job]:
        single_use = ep.spec.single_use  # one job per worker, ever (decision 0111)
        wanted = 1 if single_use else count
        jobs = self._book.pop(ep, wanted) if self._take is None else self._take(self._book, ep, worker, wanted)
        for job in jobs:
            self._assign(job, worker)
        if jobs and single_use:
            worker.spent = True
        return jobs

    def dispatch(self, ep: EndpointState) -> None:
        """Hand queued jobs to workers already waiting in a long-poll."""
        retiring: list[Taker] = []
        while ep.queued and ep.takers:
            entry = ep.takers.popleft()
            worker_id, count, future = entry
            worker = self._workers.get(worker_id)
            if future.done() or worker is None:
                continue
            if not worker.takes_jobs:  # keeps waiting (its stop answers it), and gets nothing
                retiring.append(entry)
                continue
            jobs = self._pop(ep, worker, count)
            if jobs:
                future.set_result(jobs)
            else:
                ep.takers.appendleft(entry)
                break
        ep.takers.extendleft(reversed(retiring))

    def _assign(self, job: Job, worker: Worker) -> None:
        if worker.phases and "first_job" not in worker.phases:  # its first job: the start's phases go on the job
            now, wall = self._clock.monotonic(), self._clock.time()
            ep = self._endpoints.get(worker.endpoint)
            env = ep.environment if ep is not None else None
            built = (env.started, env.built) if env is not None and env.built is not None else None
            worker.phases, job.cold_start = coldstart.first_job(
                worker.phases,
                job.created_at,
                wall - (now - worker.started_at),
                wall - (now - worker.idle_since),
                wall,
                None if built is None else (wall - (now - built[0]), wall - (now - built[1])),
            )
            worker.first_job = job.id
        self._book.taken(job, worker.id, worker.placement())
        worker.jobs = worker.jobs | {job.id}
        worker.unnamed.pop(job.id, None)
        if job.id in worker.to_stop:  # a stop meant for an earlier run of this job must not end this one
            worker.to_stop.remove(job.id)
        worker.state = WorkerState.RUNNING
        self._state.usage.observe(worker)

    def done(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A result (or a progress update) from a worker; idempotent: a late or repeated one changes nothing."""
        worker = self._worker(endpoint, worker_id)
        job = self._book.find(job_id)
        if job is not None and isinstance(body, dict) and job.worker_id == worker_id:
            if body.get("status") == "IN_PROGRESS":
                if job.status is JobStatus.IN_PROGRESS:  # progress_update; may arrive after the result: ignored then
                    job.output = body.get("output")  # progress is JSON: a binary mark is not kept for it
                    self._book.save(job)
                return
            if job.status is JobStatus.IN_PROGRESS:
                self._complete(job, body)
        if worker is not None:
            worker.jobs = worker.jobs - {job_id}
            self._after_job(worker, isinstance(body, dict) and bool(body.get("stopPod")))

    def output_too_large(self, endpoint: str, worker_id: str, job_id: str, limit: int) -> None:
        """A worker's result for its job was over ``limit`` bytes: the job fails now (reason ``output_too_large``),
        rather than be retried with an output that can never be taken."""
        message = (
            f"the job's result was larger than the {limit} bytes a worker may post; return less (put large "
            "results in storage and return a reference), or raise flashpoint serve --max-result-mb"
        )
        body = protocol.error_record("OutputTooLarge", message, reason=Reason.OUTPUT_TOO_LARGE)
        self.done(endpoint, worker_id, job_id, body)

    async def done_batch(
        self,
        endpoint: str,
        worker_id: str,
        results: list[tuple[str, Any]],
        take: int = 0,
        phases: str | None = None,
    ) -> list[dict[str, Any]]:
        """Several results of one worker (``(job id, body)``), then, with ``take``, a long-poll for up to that many
        jobs: flashpoint's own worker posts what finished together in one exchange, which carries its next jobs.
        ``phases``: a class endpoint's constructor time, reported with its first job's result
        (``wire/coldstart.py``)."""
        if phases:
            self._constructed(endpoint, worker_id, phases)
        for job_id, body in results:
            self.done(endpoint, worker_id, job_id, body)
        worker = self._workers.get(worker_id)
        if take > 0 and worker is not None and worker.takes_jobs:
            return await self.take(endpoint, worker_id, take)
        return []

    def _constructed(self, endpoint: str, worker_id: str, header: str) -> None:
        """A class endpoint's worker measured its first constructor: its ``init``, on its phases and on its first
        job's (before that job's result is applied, so its record and the cold-start histogram have it)."""
        worker = self._workers.get(worker_id)
        if worker is None or worker.endpoint != endpoint:
            return
        seconds = coldstart.constructed(worker.phases, header)
        if seconds is None:
            return
        worker.phases = coldstart.ordered({**worker.phases, "init": seconds})
        job = self._book.find(worker.first_job) if worker.first_job is not None else None
        if job is not None and job.worker_id == worker_id and job.status is JobStatus.IN_PROGRESS:
            job.cold_start = coldstart.ordered({**(job.cold_start or {}), "init": seconds})

    def _complete(self, job: Job, body: dict[str, Any]) -> None:
        error = body.get("error")
        if error:
            parsed, reason = protocol.parse_error(error)
            job.output = body.get("output")
            job.error = parsed
            self._state.finish(job, JobStatus.FAILED, reason)
        elif codec.is_binary(body) and not _binary_allowed(job, body.get("output")):
            self._state.finish(job, JobStatus.FAILED, Reason.OUTPUT_NOT_SERIALIZABLE, _BINARY_REFUSED)
        else:
            job.output = body.get("output")
            job.output_binary = codec.is_binary(body)
            self._state.finish(job, JobStatus.COMPLETED, Reason.COMPLETED)

    def chunk(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A chunk a generator handler yielded (job-stream): pending until read through ``read_chunks``."""
        self._worker(endpoint, worker_id)
        job = self._book.find(job_id)
        if job is not None and job.status is JobStatus.IN_PROGRESS and job.worker_id == worker_id:
            if not isinstance(body, dict):
                return
            chunk = {"output": body.get("output")}
            if codec.is_binary(body):
                if not _binary_allowed(job, chunk["output"]):
                    log.warning("job %s: %s; chunk dropped", job.id, _BINARY_REFUSED.message)
                    return
                chunk[ENCODING_KEY] = BINARY_ENCODING
            self._book.add_chunk(job, chunk)

    async def stop_signals(self, endpoint: str, worker_id: str, hold_s: float | None = None) -> list[str]:
        """Long-poll: job ids this worker must stop (cancelled or timed out)."""
        worker = self._worker(endpoint, worker_id, exchange=False)
        hold = self.take_hold_s if hold_s is None else hold_s
        if worker is None:
            await asyncio.sleep(min(hold, 5.0))
            return []
        if not worker.to_stop:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            worker.stop_waiter = future
            timer = settle_after(future, hold, lambda: None)
            try:
                await future
            finally:
                timer.cancel()
                if worker.stop_waiter is future:
                    worker.stop_waiter = None
        ids, worker.to_stop = worker.to_stop, []
        return ids

    def ping(self, endpoint: str, worker_id: str, job_ids: list[str] | None = None) -> None:
        """A heartbeat; ``job_ids`` are the jobs the worker says it runs (Runpod's ping ``job_id``), when it says.

        A job the worker holds but its pings stop naming was lost inside the worker: past ``lost_job_grace_s`` the
        tick's watchdog (``WorkerSupervision.watch``) gives it back to the queue, and loses the worker if it is wedged.
        """
        worker = self._worker(endpoint, worker_id, exchange=False)
        if worker is None or job_ids is None:
            return
        named, now = set(job_ids), self._clock.monotonic()
        worker.unnamed = {j: worker.unnamed.get(j, now) for j in worker.jobs if j not in named}


def signal_stop(worker: Worker, job_id: str) -> None:
    """Tell the worker (through its job-stop long-poll) to stop ``job_id``; the job is no longer its own."""
    worker.to_stop.append(job_id)
    worker.jobs = worker.jobs - {job_id}
    wake(worker)


def release_takers(ep: EndpointState, worker_id: str | None) -> None:
    """Answer the job-take long-polls of ``worker_id`` (of every worker: None) with nothing."""
    for entry in list(ep.takers):
        if worker_id is None or entry[0] == worker_id:
            ep.takers.remove(entry)
            if not entry[2].done():
                entry[2].set_result([])


#: a worker marked an output binary for a job whose caller did not accept binary output
_BINARY_REFUSED = JobError(
    "OutputNotSerializable",
    "the worker sent a binary (pickled) output for a job whose caller accepts JSON only; return JSON values",
)


def _binary_allowed(job: Job, output: Any) -> bool:
    """A binary output is kept only for a job that accepted it (the SDK's ``binary_ok``), and only as base64 text."""
    meta = job.extra.get("flashpoint")
    return isinstance(output, str) and isinstance(meta, dict) and meta.get("binary_ok") is True
