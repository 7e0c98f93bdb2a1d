"""The control plane's engine: queues per endpoint, worker placement and autoscaling, the worker protocol's verbs.

Everything here runs on one asyncio loop, so the state needs no locks. A worker is placed, not a job: jobs wait in
their endpoint's queue, the plane starts workers where placement finds devices, and workers pull jobs over HTTP.
``reconcile()`` is the one place that decides which workers to start or stop; events call it through ``kick()``,
and a short tick covers the clock (timeouts, idle scale-down, QUEUE_DELAY, start back-off).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar

from flashpoint import codec
from flashpoint.backends.base import Backend, Launch
from flashpoint.errors import (
    BackendError,
    InvalidEndpointError,
    InvalidTransitionError,
    NotFoundError,
    NotReadyError,
    QueueFullError,
)
from flashpoint.explain import Code, Explanation, Reason as WaitReason
from flashpoint.gpus import describe
from flashpoint.jobs import DEFAULT_TTL_MS, Job, JobError, JobStatus, JobView, Placement, Reason
from flashpoint.scheduler.credentials import worker_credential
from flashpoint.scheduler.exits import describe_exit, failed_by_itself
from flashpoint.scheduler.index import FleetIndex
from flashpoint.scheduler.inventory import Device, Holder, fleet_summary
from flashpoint.scheduler.placement import Fit, NoFit, feasible, place
from flashpoint.spec import EndpointSpec, ServerlessScalerType, WorkerTarget
from flashpoint.store.base import JobStore
from flashpoint.worker.runtime import LOG_MARK

T = TypeVar("T")
log = logging.getLogger("flashpoint.plane")
worker_log = logging.getLogger("flashpoint.worker")

#: a worker that exits before it ever pulled counts as a failed start; after this many in a row, queued jobs fail
MAX_START_ATTEMPTS = 5
#: how long a job may go back to the queue because its worker was lost, before it fails with worker_lost
MAX_RETRIES = 1
#: log lines kept per job
MAX_JOB_LOG_LINES = 1000
#: how long devices whose worker never came up (a Ray actor not ready in time) are passed over by placement
SET_ASIDE_S = 60.0
#: what explanations name as the holder of devices set aside
SET_ASIDE = "(set aside: a worker placed there was not ready in time)"
#: default caps of the queues, all endpoints together (``serve --max-queued-jobs`` / ``--max-queued-mb``)
MAX_QUEUED_JOBS = 100_000
MAX_QUEUED_BYTES = 1024 * 1024 * 1024
#: the longest pause before starting again after a starting worker was killed from outside (not a failed start)
LOST_START_BACKOFF_MAX_S = 5.0
#: job ids are ours: 24 hex characters and "-fp"; anything else names no job (and never reaches the store)
_JOB_ID = re.compile(r"[0-9a-f]{24}-fp")


_REASON_TEXT = {
    Reason.CANCELLED: "cancelled before it finished",
    Reason.SHUTDOWN: "the control plane shut down before the job finished",
    Reason.PURGED: "removed from the queue by purge-queue",
    Reason.QUEUE_TTL_EXPIRED: "waited in the queue past its TTL",
    Reason.TTL_EXPIRED: "still running when its TTL ran out",
}


class WorkerState(str, Enum):
    """A worker's life: STARTING until its first pull, then IDLE/RUNNING, STOPPING once asked to exit."""

    STARTING = "STARTING"
    IDLE = "IDLE"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"

    def __str__(self) -> str:
        return self.value


@dataclass(slots=True, eq=False)
class Worker:
    id: str
    endpoint: str
    devices: tuple[Device, ...]
    state: WorkerState = WorkerState.STARTING
    started_at: float = field(default_factory=time.monotonic)
    idle_since: float = field(default_factory=time.monotonic)
    jobs: set[str] = field(default_factory=set)
    #: job ids to hand to the worker's job-stop long-poll
    to_stop: list[str] = field(default_factory=list)
    stop_waiter: asyncio.Future[None] | None = None
    #: take no new jobs; stop once the running ones end (after a timeout or a stopPod)
    retiring: bool = False
    ever_ready: bool = False
    node: str = "local"
    #: the device ids the backend reports the worker really got, when it numbers them itself (Ray); else the ledger's
    device_ids: tuple[int, ...] | None = None
    stderr_tail: deque[str] = field(default_factory=lambda: deque(maxlen=20))
    #: jobs it holds that its pings stopped naming, with when that began (the watchdog's evidence)
    unnamed: dict[str, float] = field(default_factory=dict)
    #: when it last took jobs or posted a result or chunk (its job-stop long-poll and pings run on regardless)
    last_exchange: float = field(default_factory=time.monotonic)

    @property
    def live(self) -> bool:
        return self.state is not WorkerState.STOPPING and not self.retiring

    def placement(self) -> Placement:
        if not self.devices:
            return Placement(node=self.node, gpu_model=None, device_ids=(), simulated=False)
        first = self.devices[0]
        return Placement(
            node=first.node,
            gpu_model=first.model_name,
            device_ids=self.device_ids if self.device_ids is not None else tuple(d.index for d in self.devices),
            simulated=first.simulated,
        )

    def to_json(self) -> dict[str, Any]:
        placement = self.placement()
        return {
            "id": self.id,
            "endpoint": self.endpoint,
            "state": self.state.value,
            "jobs": sorted(self.jobs),
            "retiring": self.retiring,
            "placement": placement.to_json(),
        }


@dataclass(slots=True, eq=False)
class EndpointState:
    spec: EndpointSpec
    target: WorkerTarget
    registered_at: float = field(default_factory=time.time)
    queue: deque[str] = field(default_factory=deque)
    queued: int = 0
    takers: deque[tuple[str, int, asyncio.Future[list[Job]]]] = field(default_factory=deque)
    workers: dict[str, Worker] = field(default_factory=dict)
    #: why the last reconcile could not give this endpoint the workers it wants
    waiting: tuple[WaitReason, ...] = ()
    never: NoFit | None = None
    start_failures: int = 0
    #: starting workers killed from outside in a row (an OOM kill, an operator's kill): they delay, never fail, jobs
    start_losses: int = 0
    next_start_at: float = 0.0
    last_start_error: str = ""
    worker_seq: int = 0
    counters: dict[str, int] = field(default_factory=lambda: {"completed": 0, "failed": 0, "retried": 0})

    def live_workers(self) -> list[Worker]:
        return [w for w in self.workers.values() if w.live]


class ControlPlane:
    """Owns queues, workers and the fleet ledger; serves the worker protocol's verbs."""

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        *,
        worker_secret: str,
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
        self.backend = backend
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
        self.python = python
        self.worker_env = dict(worker_env or {})
        self.parent_pid = parent_pid
        #: where workers reach the plane's worker routes
        self.base_url = base_url
        #: a durable plane puts running jobs back in the queue when it closes; an embedded one cancels them
        self.requeue_on_close = requeue_on_close
        self.node = node
        self.devices: list[Device] = backend.devices()
        self.endpoints: dict[str, EndpointState] = {}
        self.workers: dict[str, Worker] = {}
        self.target_files: dict[str, str] = {}
        self._job_waiters: dict[str, list[Callable[[JobView], None]]] = {}
        self._stream_waiters: dict[str, list[asyncio.Future[None]]] = {}
        #: called with the view of every job that reaches a terminal state (webhooks, metrics)
        self.listeners: list[Callable[[JobView], None]] = []
        self._on_commit: list[Callable[[], object]] = []
        self._commit_scheduled = False
        self._next_expiry_check = 0.0
        self._kicked = False
        #: devices passed over until a monotonic time, because a worker placed on them never came up
        self._set_aside: dict[tuple[str, int], float] = {}
        self._tick_task: asyncio.Task[None] | None = None
        self._closing = False

    # ----------------------------------------------------------------------------------------------------------------
    # lifecycle

    async def start(self) -> None:
        self._tick_task = asyncio.create_task(self._ticker())
        self.backend.watch(self.fleet_changed)

    def fleet_changed(self, devices: list[Device]) -> None:
        """A node joined or left (a Ray cluster's fleet moves): workers on departed devices are lost, and every
        endpoint's "can never run" verdict is made again, so a request waiting for a model runs once a node has it."""
        present = {d.key for d in devices}
        before = {d.key for d in self.devices}
        self.devices = list(devices)
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
            never = feasible(ep.spec.candidates, ep.spec.gpu_count, self.devices)
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
                        self._save(job)
                    else:
                        self._finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)
                self._signal_stop(worker, job_id)
            self._mark_stopping(worker)
        await asyncio.sleep(0)  # let the stop long-polls answer before the signals go out
        await self.backend.close()
        if not self.requeue_on_close:
            for job in list(self.store.unfinished()):
                self._finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            try:
                self._tick(time.monotonic())
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
        if any(ep.waiting for ep in self.endpoints.values()):
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
        self.listeners.append(callback)

        def unsubscribe() -> None:
            if callback in self.listeners:
                self.listeners.remove(callback)

        return unsubscribe

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        """Add an endpoint; ``code_file`` holds its pickled code when ``target`` names no import path or command."""
        if code_file is not None:
            self.target_files.setdefault(spec.name, code_file)
        existing = self.endpoints.get(spec.name)
        if existing is not None:
            if existing.spec != spec:
                raise InvalidEndpointError(
                    f"endpoint {spec.name!r} is already registered with other options; give each endpoint its own name"
                )
            return
        ep = EndpointState(spec, target)
        if spec.uses_gpu:
            ep.never = feasible(spec.candidates, spec.gpu_count, self.devices)
            if ep.never is not None:
                log.warning(self._never_message(spec, ep.never))
        self.endpoints[spec.name] = ep
        self.kick()

    def fleet_summary(self) -> str:
        return fleet_summary(self.devices)

    def worker_credential(self, endpoint: str, worker_id: str) -> str:
        """The key of one worker: it opens the worker routes of that endpoint for that worker id only."""
        return worker_credential(self._worker_secret, endpoint, worker_id)

    def _never_message(self, spec: EndpointSpec, nofit: NoFit) -> str:
        models = sorted({d.model_name for d in self.devices})
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
            execution_timeout_ms=ep.spec.execution_timeout_ms if execution_timeout_ms is None else execution_timeout_ms,
            ttl_ms=DEFAULT_TTL_MS if ttl_ms is None else ttl_ms,
            size=size,
        )
        self.store.add(job)
        self._commit_soon()
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
        callbacks = self._job_waiters.setdefault(job_id, [])
        callbacks.append(callback)

        def unsubscribe() -> None:
            if callback in callbacks:
                callbacks.remove(callback)

        return unsubscribe

    async def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        future: asyncio.Future[JobView] = asyncio.get_running_loop().create_future()

        def resolve(view: JobView) -> None:
            if not future.done():
                future.set_result(view)

        def too_late() -> TimeoutError:
            job = self.store.get(job_id)
            return TimeoutError(f"job {job_id} is still {job.status.value if job else 'unknown'} after {timeout}s")

        unsubscribe = self.on_finish(job_id, resolve)
        timer = _settle_after(future, timeout, too_late) if timeout is not None else None
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

    # ----------------------------------------------------------------------------------------------------------------
    # the worker protocol's verbs

    def _worker(self, endpoint: str, worker_id: str, *, exchange: bool = True) -> Worker | None:
        """The worker a request names (None if unknown); its first request makes a starting worker ready.
        ``exchange``: the request takes jobs or posts results (pings and the job-stop long-poll do not)."""
        worker = self.workers.get(worker_id)
        if worker is None or worker.endpoint != endpoint:
            return None
        if exchange:
            worker.last_exchange = time.monotonic()
        if worker.state is WorkerState.STARTING:
            worker.state = WorkerState.IDLE
            worker.ever_ready = True
            worker.idle_since = time.monotonic()
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
            entry = (worker_id, count, future)
            ep.takers.append(entry)
            self._kick_if_someone_waits()  # an idle, pulling worker may have devices another endpoint waits for
            timer = _settle_after(future, hold, list)
            try:
                jobs = await future
            finally:
                timer.cancel()
                if entry in ep.takers:
                    ep.takers.remove(entry)
        return [self._job_payload(job) for job in jobs]

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
        retiring: list[tuple[str, int, asyncio.Future[list[Job]]]] = []
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
        job.started_at = time.time()
        job.worker_id = worker.id
        job.placement = worker.placement()
        worker.jobs.add(job.id)
        worker.unnamed.pop(job.id, None)
        if job.id in worker.to_stop:  # a stop meant for an earlier run of this job must not end this one
            worker.to_stop.remove(job.id)
        worker.state = WorkerState.RUNNING
        self._save(job)

    @staticmethod
    def _job_payload(job: Job) -> dict[str, Any]:
        return {"id": job.id, "input": job.input, **job.extra}

    def done(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A result (or a progress update) from a worker; idempotent: a late or repeated one changes nothing."""
        worker = self._worker(endpoint, worker_id)
        job = self.store.get(job_id)
        if job is not None and isinstance(body, dict) and job.worker_id == worker_id:
            if body.get("status") == "IN_PROGRESS":
                if job.status is JobStatus.IN_PROGRESS:  # progress_update; may arrive after the result: ignored then
                    job.output = body.get("output")  # progress is JSON: a binary mark is not kept for it
                    self._save(job)
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
        record = {"error_type": "OutputTooLarge", "error_message": message, "reason": Reason.OUTPUT_TOO_LARGE.value}
        self.done(endpoint, worker_id, job_id, {"error": json.dumps(record)})

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
            parsed, reason = _parse_error(error)
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
            worker.idle_since = time.monotonic()
        if worker.retiring and not worker.jobs:
            self._stop_worker(worker)
        self._kick_if_someone_waits()

    def stream(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        """A streamed chunk from a generator handler: pending until read through ``read_stream``."""
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
            job.stream.append(chunk)
            self._wake_stream(job.id)

    def _wake_stream(self, job_id: str) -> None:
        for future in self._stream_waiters.pop(job_id, []):
            if not future.done():
                future.set_result(None)

    async def read_stream(self, job_id: str, wait_s: float = 0.0) -> tuple[JobView, list[Any]]:
        """Chunks not yet read (a destructive read), waiting up to ``wait_s`` for one or for the job to end."""
        job = self.job(job_id)
        if not job.stream and not job.status.terminal and wait_s > 0:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._stream_waiters.setdefault(job_id, []).append(future)
            try:
                await asyncio.wait_for(future, wait_s)
            except asyncio.TimeoutError:
                pass
            job = self.job(job_id)
        chunks, job.stream = job.stream, []
        if chunks:
            self._save(job)
        return job.view(), chunks

    # ----------------------------------------------------------------------------------------------------------------
    # the Runpod client API's verbs beyond submit/cancel: retry, purge, health

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
        job.stream = []
        ep = self.endpoint(job.endpoint)
        ep.counters["retried"] += 1
        self._save(job)
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

    def health(self, endpoint: str) -> dict[str, Any]:
        """Runpod's ``/health`` body: job counters (completed/failed/retried monotonic) and workers by state."""
        ep = self.endpoint(endpoint)
        in_progress = sum(len(w.jobs) for w in ep.workers.values())
        states = [w.state for w in ep.workers.values()]
        return {
            "jobs": {
                "completed": ep.counters["completed"],
                "failed": ep.counters["failed"],
                "inProgress": in_progress,
                "inQueue": ep.queued,
                "retried": ep.counters["retried"],
            },
            "workers": {
                "idle": states.count(WorkerState.IDLE),
                "initializing": states.count(WorkerState.STARTING),
                "ready": states.count(WorkerState.IDLE) + states.count(WorkerState.RUNNING),
                "running": states.count(WorkerState.RUNNING),
                "throttled": 0,
                "unhealthy": sum(1 for w in ep.workers.values() if w.state is WorkerState.STOPPING and w.retiring),
            },
        }

    async def stop_signals(self, endpoint: str, worker_id: str, hold_s: float | None = None) -> list[str]:
        """Long-poll: job ids this worker must stop (cancelled or timed out)."""
        worker = self._worker(endpoint, worker_id, exchange=False)
        if worker is None:
            await asyncio.sleep(min(self.take_hold_s if hold_s is None else hold_s, 5.0))
            return []
        if not worker.to_stop:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            worker.stop_waiter = future
            try:
                await asyncio.wait_for(future, self.take_hold_s if hold_s is None else hold_s)
            except asyncio.TimeoutError:
                pass
            finally:
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
        named, now = set(job_ids), time.monotonic()
        worker.unnamed = {j: worker.unnamed.get(j, now) for j in worker.jobs if j not in named}

    def _signal_stop(self, worker: Worker, job_id: str) -> None:
        worker.to_stop.append(job_id)
        worker.jobs.discard(job_id)
        if worker.stop_waiter is not None and not worker.stop_waiter.done():
            worker.stop_waiter.set_result(None)

    # ----------------------------------------------------------------------------------------------------------------
    # finishing jobs

    def _finish(self, job: Job, status: JobStatus, reason: Reason, error: JobError | None = None) -> None:
        job.move(status)
        job.reason = reason
        job.finished_at = time.time()
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
        self._save(job)
        self._wake_stream(job.id)
        callbacks = self._job_waiters.pop(job.id, None)
        if callbacks or self.listeners:
            view = job.view()
            # nobody hears of the end before it is durable: a restart could otherwise run it (and end it) again
            self._on_commit.append(lambda: self._notify(view, callbacks or []))

    def _notify(self, view: JobView, callbacks: list[Callable[[JobView], None]]) -> None:
        for callback in [*callbacks, *self.listeners]:
            try:
                callback(view)
            except Exception:  # one broken waiter or listener must not keep the others from the result
                log.exception("job waiter failed")

    # ----------------------------------------------------------------------------------------------------------------
    # persistence: every change is written through; one commit per loop iteration covers all of them

    def _save(self, job: Job) -> None:
        self.store.update(job)
        self._commit_soon()

    def _commit_soon(self) -> None:
        if not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._commit)

    def _commit(self) -> None:
        self._commit_scheduled = False
        try:
            self.store.flush()
        except Exception:
            log.exception("committing job changes failed; they will be retried with the next change")
            return
        callbacks, self._on_commit = self._on_commit, []
        for callback in callbacks:
            callback()

    async def committed(self) -> None:
        """Wait until every change made so far is durable."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not future.done():
                future.set_result(None)

        self._on_commit.append(done)
        self._commit_soon()
        await future

    # ----------------------------------------------------------------------------------------------------------------
    # workers: start, output, exit, stop

    def _inventory(self) -> tuple[FleetIndex, Callable[[Holder], bool]]:
        index = FleetIndex(self.devices)
        idle: set[str] = set()
        for worker in self.workers.values():
            ep = self.endpoints[worker.endpoint]
            if (
                worker.state is WorkerState.IDLE
                and worker.live
                and not worker.jobs
                and ep.queued == 0
                and len(ep.live_workers()) > ep.spec.workers_min
            ):
                idle.add(worker.id)
            index.hold([d for d in worker.devices if index.is_free(d)], Holder(worker.id, worker.endpoint))
        if self._set_aside:
            now = time.monotonic()
            by_key = {d.key: d for d in index.devices}
            for key, until in list(self._set_aside.items()):
                if until <= now:
                    del self._set_aside[key]
                elif key in by_key and index.is_free(by_key[key]):
                    index.hold((by_key[key],), Holder("", SET_ASIDE))
        return index, lambda holder: holder.worker_id in idle

    def _desired(self, ep: EndpointState, now: float) -> int:
        spec = ep.spec
        live = ep.live_workers()
        running = sum(len(w.jobs) for w in live)
        if spec.scaler_type is ServerlessScalerType.REQUEST_COUNT:
            want = math.ceil((ep.queued + running) / spec.scaler_value)
        else:
            want = len(live)
            if ep.queued:
                starting = any(w.state is WorkerState.STARTING for w in live)
                idle = any(w.state is WorkerState.IDLE for w in live)
                if not live:
                    want = 1
                elif not starting and not idle and now - self._oldest_wait(ep) >= spec.scaler_value:
                    want = len(live) + 1
        return min(max(want, spec.workers_min), spec.workers_max)

    def _oldest_wait(self, ep: EndpointState) -> float:
        """Monotonic time at which the oldest queued job of ``ep`` was queued (approximated from wall time)."""
        for job_id in ep.queue:
            job = self.store.get(job_id)
            if job is not None and job.status is JobStatus.IN_QUEUE:
                return time.monotonic() - (time.time() - job.created_at)
        return time.monotonic()

    def reconcile(self) -> None:
        """Start the workers endpoints want, oldest waiter first; reclaim idle devices for waiters; record why not."""
        if self._closing:
            return
        now = time.monotonic()
        order = sorted(
            self.endpoints.values(), key=lambda e: (0, self._oldest_wait(e)) if e.queued else (1, e.registered_at)
        )
        for ep in order:
            self._reconcile_endpoint(ep, now)

    def _reconcile_endpoint(self, ep: EndpointState, now: float) -> None:
        spec = ep.spec
        waiting: list[WaitReason] = []
        want = self._desired(ep, now)
        live = ep.live_workers()
        while len(live) < want:
            if len(ep.workers) >= spec.workers_max:
                # workers on their way out still hold devices: an endpoint never holds more than gpu_count x max
                waiting.append(
                    WaitReason(
                        spec.describe_gpu(),
                        Code.MAX_WORKERS,
                        f"{len(ep.workers) - len(live)} worker(s) of this endpoint are stopping; "
                        f"at most {spec.workers_max} may hold devices at once",
                    )
                )
                break
            if ep.next_start_at > now:
                waiting.append(
                    WaitReason(
                        spec.describe_gpu(),
                        Code.START_BACKOFF,
                        f"{ep.start_failures} worker start(s) failed and {ep.start_losses} starting worker(s) were "
                        f"killed from outside; next attempt in {ep.next_start_at - now:.1f}s; "
                        f"last error: {ep.last_start_error or '?'}",
                    )
                )
                break
            if not spec.uses_gpu:
                self._start_worker(ep, (), None)
                live = ep.live_workers()
                continue
            index, yieldable = self._inventory()
            result = place(spec.candidates, spec.gpu_count, index, yieldable)
            if isinstance(result, NoFit):
                waiting.extend(result.reasons)
                break
            if result.reclaim:
                for holder in result.reclaim:
                    worker = self.workers.get(holder.worker_id)
                    if worker is not None:
                        log.info(
                            "worker %s of %s is idle: yielding its devices to %s", worker.id, worker.endpoint, spec.name
                        )
                        self._stop_worker(worker)
                waiting.append(
                    WaitReason(
                        describe(result.candidate),
                        Code.BUSY,
                        "idle workers of other endpoints are giving their devices up for this one",
                        tuple(sorted({h.endpoint for h in result.reclaim})),
                    )
                )
                break
            self._start_worker(ep, result.devices, result)
            live = ep.live_workers()
        if ep.queued and len(live) >= spec.workers_max and not waiting:
            busy = all(w.jobs or w.state is WorkerState.STARTING for w in live)
            if busy:
                waiting.append(
                    WaitReason(
                        spec.describe_gpu(),
                        Code.MAX_WORKERS,
                        f"all {spec.workers_max} worker(s) allowed are busy; raise workers= to run more at once",
                    )
                )
        if ep.queued and not waiting:
            if any(w.state is WorkerState.STARTING for w in live):
                waiting.append(WaitReason(spec.describe_gpu(), Code.WORKER_STARTING, "a worker is starting"))
            elif live and all(w.jobs for w in live):
                waiting.append(
                    WaitReason(
                        spec.describe_gpu(),
                        Code.SCALER,
                        f"workers are busy; {spec.scaler_type.value} adds one after {spec.scaler_value}"
                        + (
                            "s of queueing"
                            if spec.scaler_type is ServerlessScalerType.QUEUE_DELAY
                            else " jobs per worker"
                        ),
                    )
                )
        ep.waiting = tuple(waiting)

    def _start_worker(self, ep: EndpointState, devices: tuple[Device, ...], fit: Fit | None) -> None:
        ep.worker_seq += 1
        worker = Worker(
            id=f"{ep.spec.name}-w{ep.worker_seq}-{secrets.token_hex(3)}",
            endpoint=ep.spec.name,
            devices=devices,
            node=devices[0].node if devices else self.node,
        )
        self.workers[worker.id] = worker
        ep.workers[worker.id] = worker
        launch = Launch(worker.id, ep.spec.name, self._argv(ep), self._env(ep, worker), devices, ep.target.cwd)
        log.info(
            "starting worker %s for %s on %s",
            worker.id,
            ep.spec.name,
            f"{worker.placement().gpu_model} {list(worker.placement().device_ids)}" if devices else "cpu",
        )
        asyncio.get_running_loop().create_task(self._launch(worker, launch))

    async def _launch(self, worker: Worker, launch: Launch) -> None:
        try:
            worker.device_ids = await self.backend.start(launch, self._on_line, self._on_exit)
        except NotReadyError as exc:
            # not the endpoint's fault: pass these devices over for a while, and place the worker on the next candidate
            log.warning("%s; passing those devices over for %.0fs", exc, SET_ASIDE_S)
            until = time.monotonic() + SET_ASIDE_S
            for device in launch.devices:
                self._set_aside[device.key] = until
            worker.state = WorkerState.STOPPING
            self._on_exit(worker.id, -1)
        except BackendError as exc:
            worker.stderr_tail.append(str(exc))
            self._on_exit(worker.id, -1, failed=True)

    def _argv(self, ep: EndpointState) -> list[str]:
        target = ep.target
        if target.command is not None:
            command = list(target.command)
            if command[0] in ("python", "python3"):  # the plane's interpreter: the one flashpoint is installed in
                command[0] = self.python
            if self.parent_pid is None:
                return command
            return [self.python, "-m", "flashpoint.worker.launch", "--parent", str(self.parent_pid), "--", *command]
        if target.import_path is not None:
            return [self.python, "-m", "flashpoint.worker", "--import", target.import_path]
        path = self.target_files.get(ep.spec.name)
        if path is None:
            raise BackendError(f"endpoint {ep.spec.name!r} has no code file; register it with a target")
        return [self.python, "-m", "flashpoint.worker", "--pickle", path]

    def _env(self, ep: EndpointState, worker: Worker) -> dict[str, str]:
        base, name = self.base_url, ep.spec.name
        gpu = (worker.placement().gpu_model or "cpu").replace(" ", "-")
        env = dict(self.worker_env)
        env.update(ep.spec.env)
        env.update(
            {
                "CUDA_VISIBLE_DEVICES": ",".join(str(d.index) for d in worker.devices),
                "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # NVML's order, which is the order device indices come from
                "FLASHPOINT_GPU_MODEL": worker.placement().gpu_model or "",
                "FLASHPOINT_GPU_SIMULATED": "1" if any(d.simulated for d in worker.devices) else "0",
                "FLASHPOINT_ENDPOINT": name,
                "FLASHPOINT_WORKER_ID": worker.id,
                "FLASHPOINT_MAX_CONCURRENCY": str(ep.spec.max_concurrency),
                "FLASHPOINT_DEPENDENCIES": json.dumps(list(ep.spec.dependencies)),
                "RUNPOD_WEBHOOK_GET_JOB": f"{base}/v2/{name}/job-take/$ID?gpu={gpu}",
                "RUNPOD_WEBHOOK_POST_OUTPUT": f"{base}/v2/{name}/job-done/$RUNPOD_POD_ID/$ID?gpu={gpu}",
                "RUNPOD_WEBHOOK_POST_STREAM": f"{base}/v2/{name}/job-stream/$RUNPOD_POD_ID/$ID?gpu={gpu}",
                "RUNPOD_WEBHOOK_PING": f"{base}/v2/{name}/ping/$RUNPOD_POD_ID?gpu={gpu}",
                "RUNPOD_POD_ID": worker.id,
                "RUNPOD_AI_API_KEY": self.worker_credential(name, worker.id),
                "RUNPOD_PING_INTERVAL": str(int(self.ping_interval_s * 1000)),
                "FLASHPOINT_MAX_RESULT_BYTES": str(self.max_result_bytes),
                "RUNPOD_SKIP_AUTO_SYSTEM_CHECKS": "true",
            }
        )
        if self.parent_pid is not None:
            env["FLASHPOINT_PARENT_PID"] = str(self.parent_pid)
        return env

    def _on_line(self, worker_id: str, stream: str, line: str) -> None:
        worker = self.workers.get(worker_id)
        endpoint = worker.endpoint if worker else "?"
        job_id = None
        if line.startswith(LOG_MARK):
            job_id, _, line = line[len(LOG_MARK) :].partition("\x1f")
        if worker is not None and stream == "stderr":
            worker.stderr_tail.append(line)
        if job_id:
            job = self.store.get(job_id)
            if job is not None and len(job.logs) < MAX_JOB_LOG_LINES:
                job.logs.append(line)
                if job.status.terminal:  # a running job's lines are written with its next change
                    self._save(job)
        worker_log.info("[%s %s] %s", endpoint, f"job={job_id}" if job_id else f"worker={worker_id}", line)

    def _on_exit(self, worker_id: str, code: int, *, failed: bool | None = None) -> None:
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

    def _lose(self, worker: Worker, why: str) -> None:
        """A worker whose devices left the fleet: its jobs follow the retry rule now, and its process is ended."""
        log.warning("worker %s of %s is lost: %s", worker.id, worker.endpoint, why)
        self._mark_stopping(worker)
        self._forget(worker, f"worker {worker.id} was lost ({why})")
        asyncio.get_running_loop().create_task(self.backend.stop(worker.id, 0.0))

    def _forget(self, worker: Worker, what: str) -> None:
        """Drop a worker that is gone; its running jobs go back to the queue under the retry rule."""
        self.workers.pop(worker.id, None)
        ep = self.endpoints[worker.endpoint]
        ep.workers.pop(worker.id, None)
        if worker.stop_waiter is not None and not worker.stop_waiter.done():
            worker.stop_waiter.set_result(None)
        for job_id in sorted(worker.jobs):
            job = self.store.get(job_id)
            if job is not None and job.status is JobStatus.IN_PROGRESS:
                self._worker_lost(ep, job, what)
        self.kick()

    def _worker_lost(self, ep: EndpointState, job: Job, what: str) -> None:
        """The retry rule: a job whose worker is lost goes back to the front of the queue once, then fails."""
        if job.retries < MAX_RETRIES:
            log.warning("%s while running job %s; retrying it", what, job.id)
            job.move(JobStatus.IN_QUEUE)
            job.retries += 1
            job.worker_id, job.placement, job.started_at = None, None, None
            ep.counters["retried"] += 1
            self._save(job)
            self._enqueue(ep, job, front=True)
        else:
            message = f"{what} while running the job, which had already been retried {job.retries} time(s)"
            self._finish(job, JobStatus.FAILED, Reason.WORKER_LOST, JobError("WorkerLost", message))

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

    def _start_failed(self, ep: EndpointState, worker: Worker, code: int) -> None:
        ep.start_failures += 1
        ep.last_start_error = "\n".join(worker.stderr_tail)[-2000:] or f"exit code {code}"
        delay = min(0.5 * 2 ** (ep.start_failures - 1), 30.0)
        ep.next_start_at = time.monotonic() + delay
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
        delay = min(0.5 * 2 ** (ep.start_losses - 1), LOST_START_BACKOFF_MAX_S)
        ep.next_start_at = max(ep.next_start_at, time.monotonic() + delay)
        log.warning(
            "worker %s of %s was %s before taking a job; starting another in %.1fs (not counted as a failed start)",
            worker.id,
            ep.spec.name,
            describe_exit(code),
            delay,
        )

    def _mark_stopping(self, worker: Worker) -> None:
        worker.state = WorkerState.STOPPING
        if worker.stop_waiter is not None and not worker.stop_waiter.done():
            worker.stop_waiter.set_result(None)  # answer its job-stop long-poll: the worker can exit at once
        ep = self.endpoints.get(worker.endpoint)
        if ep is not None:
            self._release_takers(ep, worker.id)

    def _release_takers(self, ep: EndpointState, worker_id: str | None) -> None:
        for entry in list(ep.takers):
            if worker_id is None or entry[0] == worker_id:
                ep.takers.remove(entry)
                if not entry[2].done():
                    entry[2].set_result([])

    def _stop_worker(self, worker: Worker, grace_s: float | None = None) -> None:
        if worker.state is WorkerState.STOPPING:
            return
        self._mark_stopping(worker)
        grace = self.stop_grace_s if grace_s is None else grace_s
        asyncio.get_running_loop().create_task(self.backend.stop(worker.id, grace))

    # ----------------------------------------------------------------------------------------------------------------
    # the clock

    def _expire(self, wall: float) -> None:
        """TTL: a job still queued or running at ``expires_at`` ends TIMED_OUT; a finished one is deleted (404)."""
        for job in self.store.expired(wall):
            if not job.status.terminal:
                queued = job.status is JobStatus.IN_QUEUE
                self._end(job, JobStatus.TIMED_OUT, Reason.QUEUE_TTL_EXPIRED if queued else Reason.TTL_EXPIRED)
            elif job.id not in self._job_waiters:
                self.store.delete(job.id)
                self._commit_soon()

    def _tick(self, now: float) -> None:
        wall = time.time()
        if now >= self._next_expiry_check:  # once a second: a store scan, not a per-tick cost
            self._next_expiry_check = now + 1.0
            self._expire(wall)
        for ep in self.endpoints.values():
            self._watch_workers(ep, now)
            for worker in list(ep.workers.values()):
                for job_id in list(worker.jobs):
                    job = self.store.get(job_id)
                    if job is None or job.status is not JobStatus.IN_PROGRESS or not job.execution_timeout_ms:
                        continue
                    if job.started_at is not None and (wall - job.started_at) * 1000 >= job.execution_timeout_ms:
                        self._timeout(job, worker)
            live = ep.live_workers()
            for worker in sorted(live, key=lambda w: w.idle_since):
                if len(live) <= ep.spec.workers_min:
                    break
                # A worker with jobs still queued is not idle, only between two pulls (or before its first one,
                # when its ping arrives before its job-take): scaling it down would strand those jobs.
                if (
                    worker.state is WorkerState.IDLE
                    and not worker.jobs
                    and not ep.queued
                    and now - worker.idle_since >= ep.spec.idle_timeout_s
                ):
                    log.info(
                        "worker %s of %s idle for %.0fs: stopping it", worker.id, ep.spec.name, now - worker.idle_since
                    )
                    self._stop_worker(worker)
                    live.remove(worker)
        self.reconcile()

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
    # explanations and views

    def explain_endpoint(self, name: str) -> Explanation:
        ep = self.endpoint(name)
        return self._explain(ep, None)

    def explain_job(self, job_id: str) -> Explanation:
        job = self.job(job_id)
        return self._explain(self.endpoint(job.endpoint), job)

    def _explain(self, ep: EndpointState, job: Job | None) -> Explanation:
        self.reconcile()  # reasons are recorded by reconcile; refresh them so an explanation is never stale
        workers = {s.value.lower(): 0 for s in WorkerState}
        for worker in ep.workers.values():
            workers[worker.state.value.lower()] += 1
        position = None
        reasons = ep.waiting
        never = ep.never is not None
        if job is not None and job.status is not JobStatus.IN_QUEUE:
            summary = {
                JobStatus.IN_PROGRESS: f"running on worker {job.worker_id}",
                JobStatus.COMPLETED: "completed",
            }.get(job.status, f"ended {job.status.value} ({job.reason.value if job.reason else '?'})")
            reasons = ()
        else:
            if job is not None:
                position = self._position(ep, job)
            if ep.never is not None:
                reasons = ep.never.reasons
                summary = "can never run on this fleet: no candidate exists in it with enough devices on one node"
            elif not ep.queued and job is None:
                summary = f"nothing queued; {len(ep.workers)} worker(s)"
            elif reasons:
                summary = "waiting: " + "; ".join(sorted({r.code.value for r in reasons}))
            else:
                summary = "about to be taken by a worker"
        return Explanation(
            endpoint=ep.spec.name,
            summary=summary,
            reasons=tuple(reasons),
            never=never,
            job_id=job.id if job else None,
            status=job.status.value if job else None,
            position=position,
            queue_depth=ep.queued,
            workers=workers,
            fleet=self.fleet_summary(),
        )

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

    def fleet_view(self) -> list[dict[str, Any]]:
        inventory, _ = self._inventory()
        rows = []
        for d in self.devices:
            holder = inventory.holder(d)
            rows.append(
                {
                    **d.to_json(),
                    "worker": holder.worker_id if holder else None,
                    "endpoint": holder.endpoint if holder else None,
                }
            )
        return rows


def _settle_after(future: asyncio.Future[T], seconds: float, outcome: Callable[[], Any]) -> asyncio.TimerHandle:
    """Settle ``future`` after ``seconds`` unless something settles it first: with ``outcome()``, raised to the awaiter
    when it is an exception. ``asyncio.wait_for`` without its extra task and cancellation work: on every job's path."""

    def settle() -> None:
        if not future.done():
            value = outcome()
            if isinstance(value, BaseException):
                future.set_exception(value)
            else:
                future.set_result(value)

    return asyncio.get_running_loop().call_later(seconds, settle)


#: a worker marked an output binary for a job whose caller did not accept binary output
_BINARY_REFUSED = JobError(
    "OutputNotSerializable",
    "the worker sent a binary (pickled) output for a job whose caller accepts JSON only; return JSON values",
)


def _binary_allowed(job: Job, output: Any) -> bool:
    """A binary output is kept only for a job that accepted it (the SDK's ``binary_ok``), and only as base64 text."""
    meta = job.extra.get("flashpoint")
    return isinstance(output, str) and isinstance(meta, dict) and meta.get("binary_ok") is True


def _parse_error(error: Any) -> tuple[JobError, Reason]:
    """Runpod's error is a JSON string of a traceback record, or any plain value returned as ``{"error": ...}``."""
    if isinstance(error, str):
        try:
            record = json.loads(error)
        except ValueError:
            record = None
        if isinstance(record, dict) and "error_message" in record:
            kind = str(record.get("error_type", "Error"))
            if kind.startswith("<class '") and kind.endswith("'>"):
                kind = kind[8:-2]
            try:
                reason = Reason(record.get("reason", Reason.USER_ERROR.value))
            except ValueError:
                reason = Reason.USER_ERROR
            return JobError(kind, str(record["error_message"]), str(record.get("error_traceback", ""))), reason
    return JobError("Error", error if isinstance(error, str) else json.dumps(error)), Reason.USER_ERROR
