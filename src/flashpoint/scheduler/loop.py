"""The control plane: the queue and worker state machine, its lifecycle, and its public verbs.

Everything here runs on one asyncio loop, so the state needs no locks. A worker is placed, not a job: jobs wait in
their endpoint's queue, the plane starts workers where the planner finds devices, and workers pull jobs over HTTP.
The concepts around the state machine live in rooms of their own: the scaling planner (``planner``, pure), worker
supervision (``supervision``), group commit (``commit``), waiters and listeners (``waiters``), read models
(``views``, pure), the records (``records``), the fleet index (``index``) and the Runpod wire format (``wire``).

``reconcile()`` is the one place that starts or stops workers for scaling; events call it through ``kick()``, and
``tick()`` covers the clock (timeouts, idle scale-down, QUEUE_DELAY, start back-off). Reads (explanations, health,
fleet rows) plan without applying: they never start or stop a worker.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import sys
from collections.abc import Callable
from typing import Any

from flashpoint import codec, wire
from flashpoint.backends.base import Backend
from flashpoint.clock import SYSTEM_CLOCK, Clock
from flashpoint.errors import (
    BackendError,
    InvalidEndpointError,
    InvalidTransitionError,
    NotFoundError,
    NotReadyError,
    QueueFullError,
)
from flashpoint.explain import Explanation
from flashpoint.gpus import describe
from flashpoint.jobs import DEFAULT_TTL_MS, Job, JobError, JobStatus, JobView, Reason
from flashpoint.scheduler import planner, views
from flashpoint.scheduler.commit import GroupCommit
from flashpoint.scheduler.credentials import worker_credential
from flashpoint.scheduler.exits import describe_exit, failed_by_itself
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.inventory import Device, Holder, fleet_summary
from flashpoint.scheduler.placement import Fit, NoFit, feasible
from flashpoint.scheduler.records import EndpointState, Taker, Worker, WorkerState
from flashpoint.scheduler.supervision import (
    MAX_START_ATTEMPTS,
    SET_ASIDE,
    SET_ASIDE_S,
    Supervisor,
    failed_start_delay,
    lost_start_delay,
)
from flashpoint.scheduler.waiters import Waiters, settle_after
from flashpoint.spec import EndpointSpec, WorkerTarget
from flashpoint.store.base import JobStore

log = logging.getLogger("flashpoint.plane")
worker_log = logging.getLogger("flashpoint.worker")

#: how long a job may go back to the queue because its worker was lost, before it fails with worker_lost
MAX_RETRIES = 1
#: log lines kept per job
MAX_JOB_LOG_LINES = 1000
#: default caps of the queues, all endpoints together (``serve --max-queued-jobs`` / ``--max-queued-mb``)
MAX_QUEUED_JOBS = 100_000
MAX_QUEUED_BYTES = 1024 * 1024 * 1024
#: job ids are ours: 24 hex characters and "-fp"; anything else names no job (and never reaches the store)
_JOB_ID = re.compile(r"[0-9a-f]{24}-fp")

_REASON_TEXT = {
    Reason.CANCELLED: "cancelled before it finished",
    Reason.SHUTDOWN: "the control plane shut down before the job finished",
    Reason.PURGED: "removed from the queue by purge-queue",
    Reason.QUEUE_TTL_EXPIRED: "waited in the queue past its TTL",
    Reason.TTL_EXPIRED: "still running when its TTL ran out",
}

#: a worker marked an output binary for a job whose caller did not accept binary output
_BINARY_REFUSED = JobError(
    "OutputNotSerializable",
    "the worker sent a binary (pickled) output for a job whose caller accepts JSON only; return JSON values",
)


class ControlPlane:
    """Owns queues, workers and the fleet ledger; serves the worker protocol's verbs."""

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        *,
        worker_secret: str,
        clock: Clock = SYSTEM_CLOCK,
        tick_s: float = 0.1,
        take_hold_s: float = 20.0,
        stop_grace_s: float = 5.0,
        python: str = sys.executable,
        worker_env: dict[str, str] | None = None,
        parent_pid: int | None = None,
        node: str = "local",
        requeue_on_close: bool = False,
        ping_interval_s: float = 10.0,
        lost_job_grace_s: float | None = None,
        max_result_bytes: int = codec.MAX_RESULT_BYTES,
        max_queued_jobs: int = MAX_QUEUED_JOBS,
        max_queued_bytes: int = MAX_QUEUED_BYTES,
        base_url: str = "",
    ) -> None:
        self.store = store
        self.clock = clock
        #: never handed out: each worker gets its own credential derived from it (``worker_credential``)
        self._worker_secret = worker_secret.encode()
        #: workers ping this often (Runpod's RUNPOD_PING_INTERVAL; at least 1 s, or Runpod's heartbeat dies)
        self.ping_interval_s = max(1.0, ping_interval_s)
        #: how long a worker's pings may leave out a job it holds before the worker counts as lost
        self.lost_job_grace_s = 3 * self.ping_interval_s if lost_job_grace_s is None else lost_job_grace_s
        #: the largest result body a worker may post (the worker routes refuse more; workers keep under it)
        self.max_result_bytes = max_result_bytes
        self.max_queued_jobs = max_queued_jobs
        self.max_queued_bytes = max_queued_bytes
        #: jobs waiting in every queue, and the bytes of their input's JSON (as received over HTTP)
        self.queued_jobs = 0
        self.queued_bytes = 0
        self.tick_s = tick_s
        self.take_hold_s = take_hold_s
        self.stop_grace_s = stop_grace_s
        #: a durable plane puts running jobs back in the queue when it closes; an embedded one cancels them
        self.requeue_on_close = requeue_on_close
        self.node = node
        self.index = FleetIndex(backend.devices())
        self.endpoints: dict[str, EndpointState] = {}
        self.workers: dict[str, Worker] = {}
        self.commits = GroupCommit(store)
        self.waiters = Waiters()
        self.supervisor = Supervisor(
            backend,
            python=python,
            worker_env=worker_env or {},
            parent_pid=parent_pid,
            base_url=base_url,
            ping_interval_s=self.ping_interval_s,
            max_result_bytes=max_result_bytes,
            credential=self.worker_credential,
            on_line=self._on_line,
            on_exit=self._on_exit,
            on_not_ready=self._on_not_ready,
        )
        #: endpoints the last reconcile left waiting for something
        self._waiting: set[str] = set()
        #: devices passed over until a monotonic time, because a worker placed on them never came up
        self._set_aside: dict[tuple[str, int], tuple[float, Device]] = {}
        self._next_expiry_check = 0.0
        self._kicked = False
        self._tick_task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def devices(self) -> tuple[Device, ...]:
        return self.index.devices

    # ----------------------------------------------------------------------------------------------------------------
    # lifecycle

    async def start(self, *, ticking: bool = True) -> None:
        """Hear of fleet changes, and (``ticking``) turn the clock every ``tick_s``; a test that drives a
        ``FakeClock`` starts without the ticker and calls ``tick()`` itself."""
        if ticking:
            self._tick_task = asyncio.create_task(self._ticker())
        self.supervisor.backend.watch(self.fleet_changed)

    def fleet_changed(self, devices: list[Device]) -> None:
        """A node joined or left (a Ray cluster's fleet moves): workers on departed devices are lost, and every
        endpoint's "can never run" verdict is made again, so a request waiting for a model runs once a node has it."""
        present = {d.key for d in devices}
        before = {d.key for d in self.index.devices}
        self.index.replace(devices)
        for key in [k for k in self._set_aside if k not in present]:
            del self._set_aside[key]
        log.info(
            "fleet changed: %d device(s) joined, %d left; now %s",
            len(present - before),
            len(before - present),
            self.fleet_summary(),
        )
        for worker in list(self.workers.values()):
            if any(d.key not in present for d in worker.devices):
                gone = sorted({d.node for d in worker.devices if d.key not in present})
                self._lose(worker, f"node {', '.join(gone)} left the fleet")
        for ep in self.endpoints.values():
            if not ep.spec.uses_gpu:
                continue
            never = feasible(ep.spec.candidates, ep.spec.gpu_count, devices)
            if never is None and ep.never is not None:
                log.info("endpoint %r can run now: the fleet has %s", ep.spec.name, self.fleet_summary())
            elif never is not None and ep.never is None:
                log.warning(self._never_message(ep.spec, never))
            ep.never = never
        self.kick()

    async def close(self) -> None:
        """Stop every worker; requeue (durable) or cancel (embedded) their jobs. A second call does nothing."""
        if self._closing:
            return
        self._closing = True
        if self._tick_task is not None:
            self._tick_task.cancel()
        for ep in self.endpoints.values():
            self._release_takers(ep, None)
        for worker in list(self.workers.values()):
            for job_id in list(worker.jobs):  # async handlers are cancelled through job-stop before SIGTERM
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_PROGRESS:
                    if self.requeue_on_close:  # interrupted, not failed: it runs again after a restart
                        job.move(JobStatus.IN_QUEUE)
                        job.worker_id, job.placement, job.started_at = None, None, None
                        self.commits.save(job)
                    else:
                        self._finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)
                self._signal_stop(worker, job_id)
            self._mark_stopping(worker)
        await asyncio.sleep(0)  # let the stop long-polls answer before the signals go out
        await self.supervisor.close()
        if not self.requeue_on_close:
            for job in list(self.store.unfinished()):
                self._finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                self.tick()
            except Exception:  # a bug in one tick must not stop the plane
                log.exception("control plane tick failed")

    def kick(self) -> None:
        """Ask for a reconcile soon; many events in one loop iteration cost one reconcile."""
        if not self._kicked and not self._closing:
            self._kicked = True
            asyncio.get_running_loop().call_soon(self._reconcile_now)

    def _kick_if_someone_waits(self) -> None:
        """A worker that just became idle matters at once only to endpoints waiting for devices; scaling down by
        idle_timeout is the tick's business. This keeps a reconcile off the path of every job."""
        if self._waiting:
            self.kick()

    def _reconcile_now(self) -> None:
        self._kicked = False
        try:
            self.reconcile()
        except Exception:
            log.exception("reconcile failed")

    # ----------------------------------------------------------------------------------------------------------------
    # endpoints and jobs (called by the SDK bridge and the HTTP API, on this loop)

    def listen(self, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` for every job that reaches a terminal state, once that is durable; returns an
        unsubscribe."""
        return self.waiters.listen(callback)

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        """Add an endpoint; ``code_file`` holds its pickled code when ``target`` names no import path or command."""
        if code_file is not None:
            self.supervisor.code_files.setdefault(spec.name, code_file)
        existing = self.endpoints.get(spec.name)
        if existing is not None:
            if existing.spec != spec:
                raise InvalidEndpointError(
                    f"endpoint {spec.name!r} is already registered with other options; give each endpoint its own name"
                )
            return
        ep = EndpointState(spec, target, registered_at=self.clock.time())
        if spec.uses_gpu:
            ep.never = feasible(spec.candidates, spec.gpu_count, self.index.devices)
            if ep.never is not None:
                log.warning(self._never_message(spec, ep.never))
        self.endpoints[spec.name] = ep
        self.kick()

    def fleet_summary(self) -> str:
        return fleet_summary(self.index.devices)

    def worker_credential(self, endpoint: str, worker_id: str) -> str:
        """The key of one worker: it opens the worker routes of that endpoint for that worker id only."""
        return worker_credential(self._worker_secret, endpoint, worker_id)

    def _never_message(self, spec: EndpointSpec, nofit: NoFit) -> str:
        models = sorted({d.model_name for d in self.index.devices})
        hint = (
            f"add a fallback the fleet has, e.g. gpu=[{', '.join(repr(describe(c)) for c in spec.candidates)}, "
            f"{models[0]!r}] or gpu=GpuGroup.ANY"
            if models
            else "run on a machine with GPUs, or simulate some with FLASHPOINT_SIMULATED_GPUS"
        )
        count = f"{spec.gpu_count} x " if spec.gpu_count > 1 else ""
        return (
            f"endpoint {spec.name!r} asks for {count}{spec.describe_gpu()}, which no node of this fleet can ever "
            f"provide ({'; '.join(r.detail for r in nofit.reasons)}). Its jobs will wait IN_QUEUE until such a "
            f"device joins. The fleet has: {self.fleet_summary()}. To run now, {hint}."
        )

    def endpoint(self, name: str) -> EndpointState:
        try:
            return self.endpoints[name]
        except KeyError:
            raise NotFoundError(
                f"no endpoint named {name!r}; endpoints: {', '.join(sorted(self.endpoints)) or 'none'}"
            ) from None

    def job(self, job_id: str) -> Job:
        job = self.store.get(job_id) if _JOB_ID.fullmatch(job_id) else None
        if job is None:
            raise NotFoundError(f"no job with id {job_id!r}")
        return job

    def submit(
        self,
        endpoint: str,
        payload: Any,
        extra: dict[str, Any] | None = None,
        *,
        execution_timeout_ms: int | None = None,
        ttl_ms: int | None = None,
        size: int = 0,
    ) -> Job:
        """Queue a job; ``size`` is its input's size in bytes when known (HTTP), for the queue's byte cap."""
        ep = self.endpoint(endpoint)
        if self.queued_jobs >= self.max_queued_jobs or self.queued_bytes + size > self.max_queued_bytes:
            raise QueueFullError(
                f"the control plane holds {self.queued_jobs} queued job(s) with {self.queued_bytes} bytes of input, "
                f"at its limit of {self.max_queued_jobs} jobs and {self.max_queued_bytes} bytes; retry later, "
                "or raise the limit (flashpoint serve --max-queued-jobs / --max-queued-mb)"
            )
        job = Job(
            id=f"{secrets.token_hex(12)}-fp",
            endpoint=endpoint,
            input=payload,
            extra=dict(extra or {}),
            created_at=self.clock.time(),
            execution_timeout_ms=ep.spec.execution_timeout_ms if execution_timeout_ms is None else execution_timeout_ms,
            ttl_ms=DEFAULT_TTL_MS if ttl_ms is None else ttl_ms,
            size=size,
        )
        self.store.add(job)
        self.commits.soon()
        self._enqueue(ep, job, front=False)
        return job

    def _enqueue(self, ep: EndpointState, job: Job, *, front: bool) -> None:
        if front:
            ep.queue.appendleft(job.id)
        else:
            ep.queue.append(job.id)
        self._queued(ep, job, +1)
        self._dispatch(ep)
        if ep.queued:
            self.kick()

    def _queued(self, ep: EndpointState, job: Job, change: int) -> None:
        """Count a job into (+1) or out of (-1) its endpoint's queue and the plane's totals."""
        ep.queued += change
        self.queued_jobs += change
        self.queued_bytes += change * job.size

    def on_finish(self, job_id: str, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` once the job is terminal (now, if it already is); returns an unsubscribe."""
        job = self.job(job_id)
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

    def cancel(self, job_id: str) -> JobView:
        job = self.job(job_id)
        self._end(job, JobStatus.CANCELLED, Reason.CANCELLED)
        return job.view()

    def _end(self, job: Job, status: JobStatus, reason: Reason) -> None:
        """End a job that is queued (it leaves its queue) or running (its worker is told to stop it); else nothing."""
        if job.status is JobStatus.IN_QUEUE:
            owner = self.endpoints.get(job.endpoint)
            if owner is not None:
                self._queued(owner, job, -1)  # the id stays in the deque and is skipped when reached
            self._finish(job, status, reason)
        elif job.status is JobStatus.IN_PROGRESS:
            worker = self.workers.get(job.worker_id or "")
            self._finish(job, status, reason)
            if worker is not None:
                self._signal_stop(worker, job.id)
                self._after_job(worker)

    def retry(self, job_id: str) -> Job:
        """A FAILED or TIMED_OUT job goes back to the queue with the same id; its output and error are dropped."""
        job = self.job(job_id)
        if job.status not in (JobStatus.FAILED, JobStatus.TIMED_OUT):
            raise InvalidTransitionError(
                f"job {job_id} is {job.status.value}; only FAILED or TIMED_OUT jobs can be retried"
            )
        job.move(JobStatus.IN_QUEUE)
        job.reason = None
        job.output, job.output_binary, job.error = None, False, None
        job.worker_id, job.placement = None, None
        job.started_at, job.finished_at = None, None
        job.chunks = []
        ep = self.endpoint(job.endpoint)
        ep.counters["retried"] += 1
        self.commits.save(job)
        self._enqueue(ep, job, front=False)
        return job

    def purge(self, endpoint: str) -> int:
        """Cancel every queued job of the endpoint (running ones go on); returns how many were removed."""
        ep = self.endpoint(endpoint)
        removed = 0
        for job_id in list(ep.queue):
            job = self.store.get(job_id)
            if job is not None and job.status is JobStatus.IN_QUEUE:
                self._end(job, JobStatus.CANCELLED, Reason.PURGED)
                removed += 1
        ep.queue.clear()
        return removed

    def recover(self) -> int:
        """Queue again what an earlier run of this plane left unfinished (a durable store); returns the count.

        Jobs that were IN_PROGRESS lost their worker with the old plane: the retry rule applies to them.
        """
        recovered = 0
        for job in list(self.store.unfinished()):
            ep = self.endpoints.get(job.endpoint)
            if ep is None:
                log.warning(
                    "job %s belongs to endpoint %r, which this app does not define; left as it is", job.id, job.endpoint
                )
                continue
            if job.status is JobStatus.IN_PROGRESS:
                self._worker_lost(ep, job, f"the control plane restarted (worker {job.worker_id} is gone)")
            else:
                self._enqueue(ep, job, front=False)
            recovered += 1
        return recovered

    async def committed(self) -> None:
        """Wait until every change made so far is durable."""
        await self.commits.committed()

    # ----------------------------------------------------------------------------------------------------------------
    # the worker protocol's verbs

    def _worker(self, endpoint: str, worker_id: str, *, exchange: bool = True) -> Worker | None:
        """The worker a request names (None if unknown); its first request makes a starting worker ready.
        ``exchange``: the request takes jobs or posts results (pings and the job-stop long-poll do not)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.endpoint != endpoint:
            return None
        now = self.clock.monotonic()
        if exchange:
            worker.last_exchange = now
        if worker.state is WorkerState.STARTING:
            worker.state = WorkerState.IDLE
            worker.ever_ready = True
            worker.idle_since = now
            ep = self.endpoints[endpoint]
            ep.start_failures = ep.start_losses = 0
        return worker

    async def take(
        self, endpoint: str, worker_id: str, count: int = 1, hold_s: float | None = None
    ) -> list[dict[str, Any]]:
        """Long-poll: up to ``count`` jobs for this worker, or [] once ``hold_s`` passes (or the worker must stop)."""
        ep = self.endpoints.get(endpoint)
        worker = self._worker(endpoint, worker_id)
        hold = self.take_hold_s if hold_s is None else hold_s
        if ep is None or worker is None:  # unknown: hold anyway, so a misconfigured worker does not spin
            await asyncio.sleep(min(hold, 5.0))
            return []
        if worker.state is WorkerState.STOPPING:  # answered at once: it is about to exit
            return []
        # a retiring worker gets nothing new, but waits like any other (its stop answers it), rather than spin
        jobs = self._pop(ep, worker, count) if worker.live else []
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
        return [wire.job_payload(job.id, job.input, job.extra) for job in jobs]

    def _pop(self, ep: EndpointState, worker: Worker, count: int) -> list[Job]:
        jobs: list[Job] = []
        while ep.queue and len(jobs) < count:
            job = self.store.get(ep.queue.popleft())
            if job is None or job.status is not JobStatus.IN_QUEUE:
                continue
            self._queued(ep, job, -1)
            self._assign(job, worker)
            jobs.append(job)
        return jobs

    def _dispatch(self, ep: EndpointState) -> None:
        """Hand queued jobs to workers already waiting in a long-poll."""
        retiring: list[Taker] = []
        while ep.queued and ep.takers:
            entry = ep.takers.popleft()
            worker_id, count, future = entry
            worker = self.workers.get(worker_id)
            if future.done() or worker is None:
                continue
            if not worker.live:  # keeps waiting (its stop answers it), and gets nothing
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
        job.move(JobStatus.IN_PROGRESS)
        job.started_at = self.clock.time()
        job.worker_id = worker.id
        job.placement = worker.placement()
        worker.jobs.add(job.id)
        worker.unnamed.pop(job.id, None)
        if job.id in worker.to_stop:  # a stop meant for an earlier run of this job must not end this one
            worker.to_stop.remove(job.id)
        worker.state = WorkerState.RUNNING
        self.commits.save(job)

    def done(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A result (or a progress update) from a worker; idempotent: a late or repeated one changes nothing."""
        worker = self._worker(endpoint, worker_id)
        job = self.store.get(job_id)
        if job is not None and isinstance(body, dict) and job.worker_id == worker_id:
            if body.get("status") == "IN_PROGRESS":
                if job.status is JobStatus.IN_PROGRESS:  # progress_update; may arrive after the result: ignored then
                    job.output = body.get("output")  # progress is JSON: a binary mark is not kept for it
                    self.commits.save(job)
                return
            if job.status is JobStatus.IN_PROGRESS:
                self._complete(job, body)
        if worker is not None:
            worker.jobs.discard(job_id)
            self._after_job(worker, stop_pod=isinstance(body, dict) and bool(body.get("stopPod")))

    def output_too_large(self, endpoint: str, worker_id: str, job_id: str, limit: int) -> None:
        """A worker's result for its job was over ``limit`` bytes: the job fails now (reason ``output_too_large``),
        rather than be retried with an output that can never be taken."""
        message = (
            f"the job's result was larger than the {limit} bytes a worker may post; return less (put large "
            "results in storage and return a reference), or raise flashpoint serve --max-result-mb"
        )
        body = wire.error_record("OutputTooLarge", message, reason=Reason.OUTPUT_TOO_LARGE)
        self.done(endpoint, worker_id, job_id, body)

    async def done_batch(
        self, endpoint: str, worker_id: str, results: list[tuple[str, Any]], take: int = 0
    ) -> list[dict[str, Any]]:
        """Several results of one worker (``(job id, body)``), then, with ``take``, a long-poll for up to that many
        jobs: flashpoint's own worker posts what finished together in one exchange, which carries its next jobs."""
        for job_id, body in results:
            self.done(endpoint, worker_id, job_id, body)
        worker = self.workers.get(worker_id)
        if take > 0 and worker is not None and worker.live:
            return await self.take(endpoint, worker_id, take)
        return []

    def _complete(self, job: Job, body: dict[str, Any]) -> None:
        error = body.get("error")
        if error:
            parsed, reason = wire.parse_error(error)
            job.output = body.get("output")
            job.error = parsed
            self._finish(job, JobStatus.FAILED, reason)
        elif codec.is_binary(body) and not _binary_allowed(job, body.get("output")):
            self._finish(job, JobStatus.FAILED, Reason.OUTPUT_NOT_SERIALIZABLE, _BINARY_REFUSED)
        else:
            job.output = body.get("output")
            job.output_binary = codec.is_binary(body)
            self._finish(job, JobStatus.COMPLETED, Reason.COMPLETED)

    def _after_job(self, worker: Worker, *, stop_pod: bool = False) -> None:
        if stop_pod:
            worker.retiring = True
        if not worker.jobs and worker.state is WorkerState.RUNNING:
            worker.state = WorkerState.IDLE
            worker.idle_since = self.clock.monotonic()
        if worker.retiring and not worker.jobs:
            self._stop_worker(worker)
        self._kick_if_someone_waits()

    def chunk(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A chunk a generator handler yielded (job-stream): pending until read through ``read_chunks``."""
        self._worker(endpoint, worker_id)
        job = self.store.get(job_id)
        if job is not None and job.status is JobStatus.IN_PROGRESS and job.worker_id == worker_id:
            if not isinstance(body, dict):
                return
            chunk = {"output": body.get("output")}
            if codec.is_binary(body):
                if not _binary_allowed(job, chunk["output"]):
                    log.warning("job %s: %s; chunk dropped", job.id, _BINARY_REFUSED.message)
                    return
                chunk[codec.ENCODING_KEY] = codec.BINARY_ENCODING
            job.chunks.append(chunk)
            self.waiters.chunk_arrived(job.id)

    async def read_chunks(self, job_id: str, wait_s: float = 0.0) -> tuple[JobView, list[Any]]:
        """Chunks not yet read (a destructive read), waiting up to ``wait_s`` for one or for the job to end."""
        job = self.job(job_id)
        if not job.chunks and not job.status.terminal and wait_s > 0:
            await self.waiters.next_chunk(job_id, wait_s)
            job = self.job(job_id)
        chunks, job.chunks = job.chunks, []
        if chunks:
            self.commits.save(job)
        return job.view(), chunks

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
        tick's watchdog (``_watch_workers``) gives it back to the queue, and loses the worker if it is wedged.
        """
        worker = self._worker(endpoint, worker_id, exchange=False)
        if worker is None or job_ids is None:
            return
        named, now = set(job_ids), self.clock.monotonic()
        worker.unnamed = {j: worker.unnamed.get(j, now) for j in worker.jobs if j not in named}

    def _signal_stop(self, worker: Worker, job_id: str) -> None:
        worker.to_stop.append(job_id)
        worker.jobs.discard(job_id)
        _wake(worker)

    # ----------------------------------------------------------------------------------------------------------------
    # finishing jobs

    def _finish(self, job: Job, status: JobStatus, reason: Reason, error: JobError | None = None) -> None:
        job.move(status)
        job.reason = reason
        job.finished_at = self.clock.time()
        if error is not None:
            job.error = error
        if job.error is None and reason in _REASON_TEXT:
            job.error = JobError(status.value.title().replace("_", ""), _REASON_TEXT[reason])
        ep = self.endpoints.get(job.endpoint)
        if ep is not None:
            if status is JobStatus.COMPLETED:
                ep.counters["completed"] += 1
            elif status is JobStatus.FAILED:
                ep.counters["failed"] += 1
        self.commits.save(job)
        self.waiters.chunk_arrived(job.id)
        notify = self.waiters.take_ended(job.id)
        if notify is not None:
            view = job.view()
            # nobody hears of the end before it is durable: a restart could otherwise run it (and end it) again
            self.commits.after_commit(lambda: notify(view))

    def _worker_lost(self, ep: EndpointState, job: Job, what: str) -> None:
        """The retry rule: a job whose worker is lost goes back to the front of the queue once, then fails."""
        if job.retries < MAX_RETRIES:
            log.warning("%s while running job %s; retrying it", what, job.id)
            job.move(JobStatus.IN_QUEUE)
            job.retries += 1
            job.worker_id, job.placement, job.started_at = None, None, None
            ep.counters["retried"] += 1
            self.commits.save(job)
            self._enqueue(ep, job, front=True)
        else:
            message = f"{what} while running the job, which had already been retried {job.retries} time(s)"
            self._finish(job, JobStatus.FAILED, Reason.WORKER_LOST, JobError("WorkerLost", message))

    # ----------------------------------------------------------------------------------------------------------------
    # scaling: plan, then apply

    def plan(self) -> planner.Plan:
        """What reconcile would do now, without doing it: the reads' view of the scaler."""
        oldest = {name: t for name, ep in self.endpoints.items() if ep.queued and (t := self._oldest(ep)) is not None}
        return planner.plan(
            self.endpoints,
            self.index,
            now=self.clock.monotonic(),
            wall=self.clock.time(),
            oldest=oldest,
        )

    def _oldest(self, ep: EndpointState) -> float | None:
        """Wall time at which the oldest job still queued for ``ep`` was queued."""
        for job_id in ep.queue:
            job = self.store.get(job_id)
            if job is not None and job.status is JobStatus.IN_QUEUE:
                return job.created_at
        return None

    def reconcile(self) -> None:
        """Start the workers endpoints want, oldest waiter first; reclaim idle devices for waiters; record why not."""
        if self._closing:
            return
        plan = self.plan()
        for reclaim in plan.reclaims:
            worker = self.workers.get(reclaim.worker_id)
            if worker is not None:
                log.info(
                    "worker %s of %s is idle: yielding its devices to %s",
                    worker.id,
                    worker.endpoint,
                    reclaim.for_endpoint,
                )
                self._stop_worker(worker)
        for start in plan.starts:
            self._start_worker(self.endpoints[start.endpoint], start.fit)
        for name, reasons in plan.waiting.items():
            self.endpoints[name].waiting = reasons
        self._waiting = {name for name, reasons in plan.waiting.items() if reasons}

    def _start_worker(self, ep: EndpointState, fit: Fit | None) -> None:
        devices = fit.devices if fit is not None else ()
        now = self.clock.monotonic()
        worker = Worker(
            id=f"{ep.spec.name}-w{ep.worker_seq + 1}-{secrets.token_hex(3)}",
            endpoint=ep.spec.name,
            devices=devices,
            node=devices[0].node if devices else self.node,
            started_at=now,
            idle_since=now,
            last_exchange=now,
        )
        try:  # built before the worker is recorded: if it cannot be, nothing holds the devices
            launch = self.supervisor.launch(ep, worker)
        except BackendError as exc:
            worker.stderr_tail.append(str(exc))
            self._start_failed(ep, worker, -1)
            return
        ep.worker_seq += 1
        self.workers[worker.id] = worker
        ep.workers[worker.id] = worker
        if devices:
            self.index.hold(devices, Holder(worker.id, ep.spec.name))
        log.info(
            "starting worker %s for %s on %s",
            worker.id,
            ep.spec.name,
            f"{worker.placement().gpu_model} {list(worker.placement().device_ids)}" if devices else "cpu",
        )
        self.supervisor.start(worker, launch)

    def _stop_worker(self, worker: Worker, grace_s: float | None = None) -> None:
        if worker.state is WorkerState.STOPPING:
            return
        self._mark_stopping(worker)
        self.supervisor.stop(worker.id, self.stop_grace_s if grace_s is None else grace_s)

    def _mark_stopping(self, worker: Worker) -> None:
        worker.state = WorkerState.STOPPING
        _wake(worker)  # answer its job-stop long-poll: the worker can exit at once
        ep = self.endpoints.get(worker.endpoint)
        if ep is not None:
            self._release_takers(ep, worker.id)

    def _release_takers(self, ep: EndpointState, worker_id: str | None) -> None:
        for entry in list(ep.takers):
            if worker_id is None or entry[0] == worker_id:
                ep.takers.remove(entry)
                if not entry[2].done():
                    entry[2].set_result([])

    # ----------------------------------------------------------------------------------------------------------------
    # what the backend reports: output lines, exits, places that never came up

    def _on_line(self, worker_id: str, channel: str, line: str) -> None:
        worker = self.workers.get(worker_id)
        job_id, line = wire.untag_line(line)
        if worker is not None and channel == "stderr":
            worker.stderr_tail.append(line)
        if job_id:
            job = self.store.get(job_id) if _JOB_ID.fullmatch(job_id) else None
            # only the worker that ran the job writes to its log
            if job is not None and job.worker_id == worker_id and len(job.logs) < MAX_JOB_LOG_LINES:
                job.logs.append(line)
                if job.status.terminal:  # a running job's lines are written with its next change
                    self.commits.save(job)
        endpoint = worker.endpoint if worker else "?"
        worker_log.info("[%s %s] %s", endpoint, f"job={job_id}" if job_id else f"worker={worker_id}", line)

    def _on_exit(self, worker_id: str, code: int, failed: bool | None = None) -> None:
        """A worker process ended. Before its first pull that is a failed start only if it ``failed`` by itself
        (by default: judged from ``code``, see ``scheduler.exits``); a worker killed from outside is only lost."""
        worker = self.workers.get(worker_id)
        if worker is None:
            return
        expected = worker.state is WorkerState.STOPPING
        self._forget(worker, f"worker {worker_id} ended ({describe_exit(code)})")
        if expected or self._closing:
            return
        ep = self.endpoints[worker.endpoint]
        if worker.ever_ready:
            log.warning("worker %s of %s ended unexpectedly (%s)", worker_id, worker.endpoint, describe_exit(code))
        elif failed_by_itself(code) if failed is None else failed:
            self._start_failed(ep, worker, code)
        else:
            self._start_lost(ep, worker, code)

    def _on_not_ready(self, worker: Worker, exc: NotReadyError) -> None:
        """The worker's place never came up (a Ray actor not ready in time): not the endpoint's fault. Its devices
        are passed over for a while, and the next worker goes to the next candidate."""
        log.warning("%s; passing those devices over for %.0fs", exc, SET_ASIDE_S)
        worker.state = WorkerState.STOPPING
        self._on_exit(worker.id, -1)
        until = self.clock.monotonic() + SET_ASIDE_S
        for device in worker.devices:
            if device in self.index and self.index.is_free(device):
                self.index.hold((device,), Holder("", SET_ASIDE))
                self._set_aside[device.key] = (until, device)

    def _lose(self, worker: Worker, why: str) -> None:
        """A worker given up on (its devices left the fleet; it is wedged): its jobs follow the retry rule now, and
        its process is ended."""
        log.warning("worker %s of %s is lost: %s", worker.id, worker.endpoint, why)
        self._mark_stopping(worker)
        self._forget(worker, f"worker {worker.id} was lost ({why})")
        self.supervisor.stop(worker.id, 0.0)

    def _forget(self, worker: Worker, what: str) -> None:
        """Drop a worker that is gone; its devices return, its running jobs go back under the retry rule."""
        self.workers.pop(worker.id, None)
        ep = self.endpoints[worker.endpoint]
        ep.workers.pop(worker.id, None)
        self.index.release(worker.devices)
        _wake(worker)
        for job_id in sorted(worker.jobs):
            job = self.store.get(job_id)
            if job is not None and job.status is JobStatus.IN_PROGRESS:
                self._worker_lost(ep, job, what)
        self.kick()

    def _start_failed(self, ep: EndpointState, worker: Worker, code: int) -> None:
        ep.start_failures += 1
        ep.last_start_error = "\n".join(worker.stderr_tail)[-2000:] or f"exit code {code}"
        ep.next_start_at = self.clock.monotonic() + failed_start_delay(ep.start_failures)
        log.error(
            "worker %s of %s exited with code %s before taking a job (attempt %d of %d):\n%s",
            worker.id,
            ep.spec.name,
            code,
            ep.start_failures,
            MAX_START_ATTEMPTS,
            ep.last_start_error,
        )
        if ep.start_failures >= MAX_START_ATTEMPTS:
            error = JobError(
                "WorkerStartFailed",
                f"no worker of {ep.spec.name!r} could start "
                f"({ep.start_failures} attempts); last error:\n{ep.last_start_error}",
            )
            for job_id in list(ep.queue):
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_QUEUE:
                    self._queued(ep, job, -1)
                    self._finish(job, JobStatus.FAILED, Reason.WORKER_START_FAILED, error)
            ep.queue.clear()

    def _start_lost(self, ep: EndpointState, worker: Worker, code: int) -> None:
        """A starting worker killed from outside: not its handler's fault, so no failed start is counted and the
        queued jobs wait for the next worker; a short back-off keeps a kill loop (say, OOM) from spinning."""
        ep.start_losses += 1
        delay = lost_start_delay(ep.start_losses)
        ep.next_start_at = max(ep.next_start_at, self.clock.monotonic() + delay)
        log.warning(
            "worker %s of %s was %s before taking a job; starting another in %.1fs (not counted as a failed start)",
            worker.id,
            ep.spec.name,
            describe_exit(code),
            delay,
        )

    # ----------------------------------------------------------------------------------------------------------------
    # the clock

    def tick(self) -> None:
        """One turn of the clock: TTLs, set-aside devices, the watchdog, execution timeouts, idle scale-down, then
        a reconcile. The ticker calls it every ``tick_s``; tests call it after moving a ``FakeClock``."""
        now, wall = self.clock.monotonic(), self.clock.time()
        if now >= self._next_expiry_check:  # once a second: a store scan, not a per-tick cost
            self._next_expiry_check = now + 1.0
            self._expire(wall)
        for key, (until, device) in list(self._set_aside.items()):
            if until <= now:
                del self._set_aside[key]
                self.index.release((device,))
        for ep in self.endpoints.values():
            self._watch_workers(ep, now)
            for worker in list(ep.workers.values()):
                for job_id in list(worker.jobs):
                    job = self.store.get(job_id)
                    if job is None or job.status is not JobStatus.IN_PROGRESS or not job.execution_timeout_ms:
                        continue
                    if job.started_at is not None and (wall - job.started_at) * 1000 >= job.execution_timeout_ms:
                        self._timeout(job, worker)
            for worker in planner.idle_stops(ep, now):
                log.info(
                    "worker %s of %s idle for %.0fs: stopping it", worker.id, ep.spec.name, now - worker.idle_since
                )
                self._stop_worker(worker)
        self.reconcile()

    def _expire(self, wall: float) -> None:
        """TTL: a job still queued or running at ``expires_at`` ends TIMED_OUT; a finished one is deleted (404)."""
        for job in self.store.expired(wall):
            if not job.status.terminal:
                queued = job.status is JobStatus.IN_QUEUE
                self._end(job, JobStatus.TIMED_OUT, Reason.QUEUE_TTL_EXPIRED if queued else Reason.TTL_EXPIRED)
            elif not self.waiters.waits_for(job.id):
                self.store.delete(job.id)
                self.commits.soon()

    def _watch_workers(self, ep: EndpointState, now: float) -> None:
        """The watchdog, for jobs a worker holds but its pings have left out for ``lost_job_grace_s`` (it neither
        runs them nor posted their results). A worker that has not taken or posted anything since is wedged: it is
        lost, and its jobs follow the retry rule. One that goes on working only dropped those jobs: they follow the
        retry rule (and the worker is told to stop them, should it still have them), and it keeps serving."""
        for worker in list(ep.workers.values()):
            dropped = [
                j for j, since in worker.unnamed.items() if j in worker.jobs and now - since >= self.lost_job_grace_s
            ]
            if not dropped:
                continue
            since = min(worker.unnamed[j] for j in dropped)
            if worker.last_exchange < since:
                self._lose(
                    worker,
                    f"it holds job(s) {', '.join(dropped)} that its pings have not named for {now - since:.0f}s, "
                    "and has taken and posted nothing since",
                )
                continue
            for job_id in dropped:
                worker.unnamed.pop(job_id, None)
                self._signal_stop(worker, job_id)
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_PROGRESS:
                    self._worker_lost(ep, job, f"worker {worker.id} dropped the job (its pings stopped naming it)")
            self._after_job(worker)

    def _timeout(self, job: Job, worker: Worker) -> None:
        log.warning(
            "job %s ran past its execution timeout of %d ms; replacing worker %s",
            job.id,
            job.execution_timeout_ms,
            worker.id,
        )
        self._finish(
            job,
            JobStatus.TIMED_OUT,
            Reason.EXECUTION_TIMEOUT,
            JobError("TimeoutError", f"execution exceeded {job.execution_timeout_ms} ms"),
        )
        self._signal_stop(worker, job.id)
        # a sync handler cannot be interrupted: the worker is replaced, once its other jobs are done
        worker.retiring = True
        if not worker.jobs:
            self._stop_worker(worker, grace_s=1.0)
        self.kick()

    # ----------------------------------------------------------------------------------------------------------------
    # reads: they plan without applying, and change nothing

    def explain_endpoint(self, name: str) -> Explanation:
        ep = self.endpoint(name)
        return views.explain(ep, None, self.plan().waiting.get(name, ()), position=None, fleet=self.fleet_summary())

    def explain_job(self, job_id: str) -> Explanation:
        job = self.job(job_id)
        ep = self.endpoint(job.endpoint)
        position = self._position(ep, job) if job.status is JobStatus.IN_QUEUE else None
        waiting = self.plan().waiting.get(ep.spec.name, ())
        return views.explain(ep, job, waiting, position=position, fleet=self.fleet_summary())

    def _position(self, ep: EndpointState, job: Job) -> int:
        """1-based place of a queued job among its endpoint's queued jobs (the deque is in queue order)."""
        position = 0
        for job_id in ep.queue:
            other = self.store.get(job_id)
            if other is not None and other.status is JobStatus.IN_QUEUE:
                position += 1
            if job_id == job.id:
                break
        return position

    def health(self, endpoint: str) -> dict[str, Any]:
        """Runpod's ``/health`` body."""
        return views.health(self.endpoint(endpoint))

    def fleet_view(self) -> list[dict[str, Any]]:
        return views.fleet_rows(self.index)

    def endpoint_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """``GET /v1/endpoints`` (or one endpoint's row): options, queue, workers, counters, explanation; one plan
        serves every row."""
        chosen = [self.endpoint(name)] if name is not None else list(self.endpoints.values())
        waiting = self.plan().waiting
        fleet = self.fleet_summary()
        return [
            views.endpoint_row(ep, views.explain(ep, None, waiting.get(ep.spec.name, ()), position=None, fleet=fleet))
            for ep in chosen
        ]

    def gauges(self) -> list[views.EndpointGauges]:
        """What a metrics scrape reads of each endpoint."""
        return views.gauges(self.endpoints.values())

    def list_jobs(
        self, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[JobView]:
        """Jobs, newest first."""
        return [job.view() for job in self.store.list(endpoint=endpoint, status=status, limit=limit)]

    async def settled(self) -> None:
        """Return once every reconcile asked for has run and every worker start and stop has reached the backend
        (the test door's way to wait for the plane, instead of sleeping)."""
        while self._kicked or self.supervisor.pending:
            await asyncio.sleep(0)
            await self.supervisor.settle()


def _wake(worker: Worker) -> None:
    """Answer the worker's job-stop long-poll now."""
    if worker.stop_waiter is not None and not worker.stop_waiter.done():
        worker.stop_waiter.set_result(None)


def _binary_allowed(job: Job, output: Any) -> bool:
    """A binary output is kept only for a job that accepted it (the SDK's ``binary_ok``), and only as base64 text."""
    meta = job.extra.get("flashpoint")
    return isinstance(output, str) and isinstance(meta, dict) and meta.get("binary_ok") is True
