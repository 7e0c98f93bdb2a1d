"""The control plane: the queue and worker state machine, its lifecycle, and its public verbs.

Everything here runs on one asyncio loop, so the state needs no locks. A worker is placed, not a job: jobs wait in
their endpoint's queue, the plane starts workers where the planner finds devices, and workers pull jobs over HTTP.
``ControlPlane`` holds the state the rooms share (``state``: the endpoints, the workers, the fleet index, the job book)
and the collaborators that hold the concepts around the state machine, each given that state and the callbacks it
needs, never the plane: the endpoints and their verdicts on the fleet (``registry``, with departed nodes in
``departed``), the worker protocol's verbs (``protocol``), route endpoints' requests and readiness (``routeserving``,
``readiness``), worker supervision (``supervision``), machine-wide device leases (``ownership.leasing``), the reads
(``reads``) and their read models (``views``, pure), and the job book (``jobbook``: records and queues, with group
commit in ``commit`` and waiters and listeners in ``waiters``). The scaling planner (``planner``, pure), the records
(``records``), the fleet index (``placement.index``) and the Runpod wire format (``wire``) are the vocabulary they
share. Nothing of these imports this module.

``reconcile()`` is the one place that starts or stops workers for scaling; events call it through ``kick()``, and
``tick()`` covers the clock (timeouts, idle scale-down, QUEUE_DELAY, start back-off). Reads (explanations, health,
fleet rows) plan without applying: they never start or stop a worker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from flashpoint.backends.base import Backend
from flashpoint.clock import SYSTEM_CLOCK, Clock
from flashpoint.errors import InvalidEndpointError, InvalidTransitionError
from flashpoint.explain import Explanation
from flashpoint.fleet.inventory import Fleet
from flashpoint.fleet.telemetry import NvmlReader, Reader
from flashpoint.jobs import Job, JobError, JobStatus, JobView, Reason
from flashpoint.scheduler import departed, draining, planner, readiness, views
from flashpoint.scheduler.credentials import worker_credential
from flashpoint.scheduler.envgate import EnvironmentGate, EnvironmentSource
from flashpoint.scheduler.gpusampler import GpuSampler
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.launcher import AppSecrets, check_secrets, no_app_secrets
from flashpoint.scheduler.ownership.leases import DeviceLeases
from flashpoint.scheduler.ownership.leasing import DeviceLeasing
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.protocol import WorkerProtocol, release_takers, signal_stop
from flashpoint.scheduler.quotagate import QuotaGate
from flashpoint.scheduler.quotas import QuotaSource
from flashpoint.scheduler.readiness import Probe
from flashpoint.scheduler.reads import PlaneReads
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.scheduler.registry import EndpointRegistry
from flashpoint.scheduler.rollout import Rollouts, Together
from flashpoint.scheduler.routeserving import RouteServing, not_a_queue_endpoint, oldest_held
from flashpoint.scheduler.scalers import Scalers, check_scaling
from flashpoint.scheduler.schedules import Schedules, check_schedule
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.scheduler.state import PlaneState
from flashpoint.scheduler.supervision import WorkerSupervision
from flashpoint.spec import EndpointSpec, WorkerTarget
from flashpoint.store.base import JobStore

log = logging.getLogger("flashpoint.plane")

#: how long a job may go back to the queue because its worker was lost, before it fails with worker_lost
MAX_RETRIES = 1


class ControlPlane:
    """Owns queues, workers and the fleet ledger through its collaborators, and is the one object its callers use.

    Its own verbs: ``submit``, ``cancel``, ``retry``, ``purge``, ``recover``, ``job``, ``endpoint``, ``wait``,
    ``on_finish``, ``listen``, ``read_chunks``, ``committed``, ``worker_credential``, and the lifecycle (``start``,
    ``fleet_changed``, ``kick``, ``reconcile``, ``plan``, ``tick``, ``settled``, ``close``). Verbs it passes to the
    collaborator that owns them, so that the HTTP layer, the composition roots and the SDK bridge call one object:
    ``register`` and ``redeclare`` (``registry``); the worker protocol's ``take``, ``done``, ``done_batch``,
    ``chunk``, ``stop_signals``, ``ping`` and ``output_too_large`` (``protocol``); the route proxy's
    ``take_route_worker``, ``hold_route_worker``, ``release_route_worker`` and ``route_secret`` (``routes``); and the
    reads ``explain_endpoint``, ``explain_job``, ``health``, ``fleet_view``, ``node_view``, ``endpoint_rows``,
    ``gauges``, ``list_jobs`` and ``fleet_summary`` (``reads``).
    """

    def __init__(
        self,
        store: JobStore,
        backend: Backend,
        *,
        worker_secret: str,
        settings: PlaneSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
        probe: Probe = readiness.ping,
        environments: EnvironmentSource | None = None,
        leases: DeviceLeases | None = None,
        secrets: AppSecrets | None = None,
        quotas: QuotaSource | None = None,
        telemetry: Reader | None = None,
    ) -> None:
        """``settings`` are the plane's limits and tunables; the rest are what it is built from. ``probe`` asks a
        route worker's ``/ping`` (a test door's is scripted); ``environments`` builds endpoints' environments (the
        environment cache at its default root when None); ``leases`` the machine-wide device leases (this process's,
        in ``leases.lease_dir()``, when None); ``secrets`` the values of the secrets endpoints name in their ``env``,
        as the resolver of an endpoint's app (``spec.app``; None: of no app) (None: this plane has none, and an
        endpoint that names one is refused); ``quotas`` the quotas in force (``scheduler/quotas.py``; None: none);
        ``telemetry`` reads GPU samples of this node's real devices (NVML when None; a test's recorded samples)."""
        self.settings = settings = settings or PlaneSettings()
        #: None: no secret store (the embedded plane, dev)
        self._secrets = secrets
        self.store = store
        self.clock = clock
        #: never handed out: each worker gets its own credential derived from it (``worker_credential``)
        self._worker_secret = worker_secret.encode()
        self.max_result_bytes = settings.max_result_bytes
        self.requeue_on_close = settings.requeue_on_close
        book = JobBook(
            store, clock, max_queued_jobs=settings.max_queued_jobs, max_queued_bytes=settings.max_queued_bytes
        )
        #: what the collaborators share; its containers are also the plane's own attributes, for its callers
        self.state = state = PlaneState(clock, FleetIndex(backend.devices(), backend.nodes()), book)
        self.index, self.book = state.index, state.book
        #: every worker's device time, busy and idle, attributed (``scheduler/usage.py``, decision 0112)
        self.usage = state.usage
        self.endpoints, self.routed, self.workers = state.endpoints, state.routed, state.workers
        self.leasing = DeviceLeasing(
            state, leases, url=settings.base_url, server=settings.requeue_on_close, kick=self.kick
        )
        #: quotas and budgets (decision 0113): the planner's limit, the jobs workers take, submit's budget check
        self.quotas = QuotaGate(state, quotas, usage=lambda: self.usage)
        self.reads = PlaneReads(state, plan=self.plan, quotas=self.quotas, auto_idle=settings.idle_timeout_auto)
        #: GPU telemetry of this node's real devices, sampled in a worker thread (``gpusampler.py``, decision 0117)
        reader = telemetry if telemetry is not None else NvmlReader()
        self.telemetry = GpuSampler(state, reader, interval_s=settings.gpu_sample_s, node=settings.node)
        #: flashpoint's scalers' samples and calls, once a tick (``scheduler/scalers.py``)
        self.scalers = Scalers(state.endpoints, self.kick)
        # route serving is built before supervision, which it reaches through the plane once that is there
        self.routes = RouteServing(
            state,
            probe=probe,
            ready_timeout_s=settings.route_ready_timeout_s,
            poll_s=settings.route_poll_s,
            credential=self.worker_credential,
            explain=self.reads.explain_endpoint,
            stop_worker=lambda worker: self.supervision.stop(worker),
            failed_start=lambda worker, why: self.supervision.fail_start(worker, why),
            kick=self.kick,
            kick_if_someone_waits=self._kick_if_someone_waits,
        )
        self.supervision = WorkerSupervision(
            state,
            backend,
            settings,
            credential=self.worker_credential,
            leasing=self.leasing,
            routes=self.routes,
            job_lost=self._worker_lost,
            kick=self.kick,
            kick_if_someone_waits=self._kick_if_someone_waits,
            secrets=secrets or no_app_secrets,
        )
        self.protocol = WorkerProtocol(
            state,
            take_hold_s=settings.take_hold_s,
            after_job=self.supervision.after_job,
            kick_if_someone_waits=self._kick_if_someone_waits,
            take=self.quotas.take,
        )
        if quotas is not None:  # a key's job that ends may let another endpoint's idle worker take that key's jobs
            self.book.waiters.listen(lambda view: self._quota_freed())
        #: starts and stops worker processes through the backend, and knows what each is started with
        self.supervisor = self.supervision.supervisor
        #: builds the environments of endpoints with dependencies, unless the backend does (Ray's runtime_env)
        self.envs: EnvironmentGate | None = None
        if not getattr(backend, "builds_environments", False):
            self.envs = EnvironmentGate(
                environments, clock, on_ready=lambda ep: self.kick(), on_failed=self._environment_failed
            )
        #: endpoints the last reconcile left waiting for something
        self._waiting: set[str] = set()
        self.registry = EndpointRegistry(
            state,
            code_files=self.supervisor.code_files,
            envs=self.envs,
            fleet_summary=self.reads.fleet_summary,
            stop_worker=self.supervision.stop,
            kick=self.kick,
        )
        self.rollouts = Rollouts(
            state,
            registry=self.registry,
            supervision=self.supervision,
            envs=self.envs,
            dispatch=self.protocol.dispatch,
            serve_held=self.routes.serve_held,
            take_away=lambda key, reason: self.unregister(key, reason=reason),
            kick=self.kick,
        )
        #: endpoints' cron schedules: a job at each fire time, and their history (``scheduler/schedules.py``)
        self.schedules = Schedules(
            state, enabled=settings.run_schedules, submit=lambda key, extra: self.submit(key, {}, extra)
        )
        #: what the planner's sharing rules read: classes, fair-share weights, the placement override
        self._sharing = planner.Sharing(settings.priority_classes, settings.app_weights, settings.placement_policy)
        self._next_expiry_check = 0.0
        self._kicked = False
        self._tick_task: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------------------------------------------------------
    # lifecycle

    async def start(self, *, ticking: bool = True) -> None:
        """Hear of fleet changes, and (``ticking``) turn the clock every ``tick_s``; a test that drives a
        ``FakeClock`` starts without the ticker and calls ``tick()`` itself."""
        if ticking:
            self._tick_task = asyncio.create_task(self._ticker())
            self.telemetry.start()
        self.supervisor.backend.watch(self.fleet_changed)

    def fleet_changed(self, fleet: Fleet) -> None:
        """A node joined or left (a Ray cluster's fleet moves): workers on departed devices or nodes are lost, and
        every endpoint's "can never run" verdict is made again, so a request waiting for a model (or a node large
        enough, in its datacenter) runs once one joins."""
        present = {d.key for d in fleet.devices}
        before = {d.key for d in self.index.devices}
        self.registry.remember_departed(fleet, self.clock.time())
        self.index.replace(fleet.devices, fleet.nodes)
        joined, left = len(present - before), len(before - present)
        log.info("fleet changed: %d device(s) joined, %d left; now %s", joined, left, self.fleet_summary())
        self.supervision.lose_departed(fleet)
        self.registry.judge_again()
        if self._tick_task is not None:  # real devices of this node may have joined
            self.telemetry.start()
        self.kick()

    def drain(self) -> None:
        """Take no new work while the running jobs and requests finish (``draining.py``); ``busy`` counts them."""
        draining.drain(self.state, self.registry, self.rollouts)

    @property
    def draining(self) -> bool:
        return self.state.draining

    def busy(self) -> int:
        return draining.busy(self.state)

    async def close(self) -> None:
        """Stop every worker; requeue (durable) or cancel (embedded) their jobs. A second call does nothing."""
        if self.state.closing:
            return
        self.rollouts.close()
        self.state.closing = True
        if self._tick_task is not None:
            self._tick_task.cancel()
        await self.scalers.close()
        await self.telemetry.close()
        for ep in self.endpoints.values():
            release_takers(ep, None)
        await self.routes.close()
        if self.envs is not None:
            await self.envs.close()
        for worker in list(self.workers.values()):
            for job_id in list(worker.jobs):  # async handlers are cancelled through job-stop before SIGTERM
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_PROGRESS:
                    if self.requeue_on_close:  # cut short: it runs again after a restart, counted as a retry
                        self.book.back_to_queue(job, retried=True, outcome=Reason.WORKER_LOST)
                    else:
                        self.state.finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)
                signal_stop(worker, job_id)
            self.supervision.mark_stopping(worker)
        await asyncio.sleep(0)  # let the stop long-polls answer before the signals go out
        await self.supervisor.close()
        self.leasing.close()
        self.usage.flush()  # workers' time up to now, with the last commit
        if not self.requeue_on_close:
            for job in list(self.store.unfinished()):
                self.state.finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tick_s)
            try:
                self.tick()
            except Exception:  # a bug in one tick must not stop the plane
                log.exception("control plane tick failed")

    def kick(self) -> None:
        """Ask for a reconcile soon; many events in one loop iteration cost one reconcile."""
        if not self._kicked and not self.state.closing:
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
        return self.book.waiters.listen(callback)

    def worker_credential(self, endpoint: str, worker_id: str) -> str:
        """The key of one worker: it opens the worker routes of that endpoint for that worker id only."""
        return worker_credential(self._worker_secret, endpoint, worker_id)

    def endpoint(self, name: str) -> EndpointState:
        """Its id, else the one endpoint with that bare name (``names.resolve``: NotFoundError, ConflictError)."""
        return self.state.endpoint(name)

    def job(self, job_id: str) -> Job:
        return self.book.get(job_id)

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
        draining.refuse_if_draining(self.state)
        ep = self.endpoint(endpoint)
        if ep.spec.serves_routes:
            raise not_a_queue_endpoint(endpoint)
        self.quotas.check_submit(ep.spec, extra)  # a spent budget refuses it (429), rather than queue it forever
        job = self.book.create(ep, payload, extra, execution_timeout_ms=execution_timeout_ms, ttl_ms=ttl_ms, size=size)
        if self.envs is not None and (failure := self.envs.failed_for_good(ep)) is not None:
            self.state.finish(
                job, JobStatus.FAILED, Reason.ENVIRONMENT_FAILED, JobError("EnvironmentBuildError", failure)
            )
            return job
        ep.traffic.arrived(self.clock.monotonic(), busy=bool(ep.queued or ep.workers.census.busy))
        self._enqueue(ep, job, front=False)
        return job

    def _quota_freed(self) -> None:
        """A job ended: workers waiting for jobs may now take those their key's quota held back."""
        for ep in self.endpoints.values():
            if ep.queued and ep.takers:
                self.protocol.dispatch(ep)

    def _enqueue(self, ep: EndpointState, job: Job, *, front: bool) -> None:
        self.book.push(ep, job, front=front)
        self.protocol.dispatch(ep)
        if ep.queued:
            self.kick()

    def on_finish(self, job_id: str, callback: Callable[[JobView], None]) -> Callable[[], None]:
        """Call ``callback(view)`` once the job is terminal (now, if it already is); returns an unsubscribe."""
        return self.book.on_finish(job_id, callback)

    async def wait(self, job_id: str, timeout: float | None = None) -> JobView:
        return await self.book.wait(job_id, timeout)

    def cancel(self, job_id: str) -> JobView:
        job = self.job(job_id)
        self._end(job, JobStatus.CANCELLED, Reason.CANCELLED)
        return job.view()

    def _end(self, job: Job, status: JobStatus, reason: Reason) -> None:
        """End a job that is queued (it leaves its queue) or running (its worker is told to stop it); else nothing."""
        if job.status is JobStatus.IN_QUEUE:
            owner = self.endpoints.get(job.endpoint)
            if owner is not None:
                self.book.count(owner, job, -1)  # the id stays in the deque and is skipped when reached
            self.state.finish(job, status, reason)
        elif job.status is JobStatus.IN_PROGRESS:
            worker = self.workers.get(job.worker_id or "")
            self.state.finish(job, status, reason)
            if worker is not None:
                signal_stop(worker, job.id)
                self.supervision.after_job(worker)

    def retry(self, job_id: str) -> Job:
        """A FAILED or TIMED_OUT job goes back to the queue with the same id; its output and error are dropped."""
        job = self.job(job_id)
        if job.status not in (JobStatus.FAILED, JobStatus.TIMED_OUT):
            raise InvalidTransitionError(
                f"job {job_id} is {job.status.value}; only FAILED or TIMED_OUT jobs can be retried"
            )
        ep = self.endpoint(job.endpoint)
        self.book.reset(job)
        ep.counters["retried"] += 1
        self._enqueue(ep, job, front=False)
        return job

    def purge(self, endpoint: str) -> int:
        """Cancel every queued job of the endpoint (running ones go on); returns how many were removed."""
        ep = self.endpoint(endpoint)
        queued = self.book.queued(ep)
        for job in queued:
            self._end(job, JobStatus.CANCELLED, Reason.PURGED)
        ep.queue.clear()
        ep.low_queue.clear()
        return len(queued)

    def recover(self) -> int:
        """Queue again what an earlier run of this plane left unfinished (a durable store); returns the count.

        Jobs that were IN_PROGRESS lost their worker with the old plane: the retry rule applies to them.
        """
        recovered = 0
        for job in list(self.store.unfinished()):
            ep = self.endpoints.get(job.endpoint)
            if ep is None or ep.spec.serves_routes:
                log.warning(
                    "job %s belongs to endpoint %r, which this app does not define as a queue endpoint; left as it is",
                    job.id,
                    job.endpoint,
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
        await self.book.commits.committed()

    async def read_chunks(self, job_id: str, wait_s: float = 0.0) -> tuple[JobView, list[Any]]:
        """Chunks not yet read (a destructive read), waiting up to ``wait_s`` for one or for the job to end."""
        return await self.book.read_chunks(job_id, wait_s)

    # ----------------------------------------------------------------------------------------------------------------
    # finishing jobs

    def _environment_failed(self, ep: EndpointState, error: str) -> None:
        """The endpoint's environment could not be built: its queued jobs end FAILED with the installer's error."""
        self.state.fail_queued(ep, Reason.ENVIRONMENT_FAILED, JobError("EnvironmentBuildError", error))
        self.kick()

    def _worker_lost(self, ep: EndpointState, job: Job, what: str, preempted: bool = False) -> None:
        """The retry rule: a job whose worker is lost goes back to the front of the queue once, then fails (at once
        when its endpoint was taken away: no queue of it is served any more). A job whose worker was ``preempted``
        goes back to the front of its queue whatever its retries: not a failure, not a retry (reason ``preempted``)."""
        if preempted and self.endpoints.get(ep.spec.key) is ep:
            log.info("%s; job %s goes back to its queue", what, job.id)
            self.book.back_to_queue(job, retried=False, outcome=Reason.PREEMPTED)
            self._enqueue(ep, job, front=True)
        elif self.endpoints.get(ep.spec.key) is not ep:
            self.state.finish(job, JobStatus.FAILED, Reason.WORKER_LOST, JobError("WorkerLost", f"{what}"))
        elif job.retries < MAX_RETRIES:
            log.warning("%s while running job %s; retrying it", what, job.id)
            self.book.back_to_queue(job, retried=True)
            ep.counters["retried"] += 1
            self._enqueue(ep, job, front=True)
        else:
            message = f"{what} while running the job, which had already been retried {job.retries} time(s)"
            self.state.finish(job, JobStatus.FAILED, Reason.WORKER_LOST, JobError("WorkerLost", message))

    # ----------------------------------------------------------------------------------------------------------------
    # scaling: plan, then apply

    def plan(self) -> planner.Plan:
        """What reconcile would do now, without doing it: the reads' view of the scaler."""
        oldest = {
            n: t
            for n, ep in self.endpoints.items()
            if ep.queued and (t := oldest_held(ep) if ep.spec.serves_routes else self.book.oldest(ep)) is not None
        }
        plan = planner.plan(
            self.endpoints,
            self.index,
            now=self.clock.monotonic(),
            wall=self.clock.time(),
            oldest=oldest,
            wanted=self.leasing.wanted_elsewhere,
            limit=self.quotas.limit,
            sharing=self._sharing,
            auto_idle=self.settings.idle_timeout_auto,
        )
        if not self.registry.departed:
            return plan
        away = self.registry.away
        waiting = {name: departed.with_away(r, away.get(name, {})) for name, r in plan.waiting.items()}
        return dataclasses.replace(plan, waiting=waiting)

    def reconcile(self) -> None:
        """Start the workers endpoints want, oldest waiter first; reclaim idle devices for waiters; record why not."""
        if self.state.closing or self.state.draining:
            return
        if self.envs is not None:
            self.envs.start_missing(self.endpoints.values())
        if self.rollouts.active:  # before the planner: a rollout's new workers take the room it finds first
            self.rollouts.step()
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
                worker.stopping_for = reclaim.for_endpoint
                self.supervision.stop(worker)
        for preempt in plan.preempts:
            worker = self.workers.get(preempt.worker_id)
            if worker is not None:
                self.supervision.preempt(worker, preempt.for_endpoint, self.settings.preempt_grace_s)
        for start in plan.starts:
            self.supervision.start(self.endpoints[start.endpoint], start.fit)
        for name, reasons in plan.waiting.items():
            self.endpoints[name].waiting = reasons
        self._waiting = {name for name, reasons in plan.waiting.items() if reasons}

    # ----------------------------------------------------------------------------------------------------------------
    # the clock

    def tick(self) -> None:
        """One turn of the clock: TTLs, set-aside devices, the watchdog, execution timeouts, idle scale-down, cron
        schedules, then a reconcile. The ticker calls it every ``tick_s``; tests call it after moving a
        ``FakeClock``."""
        now, wall = self.clock.monotonic(), self.clock.time()
        if now >= self._next_expiry_check:  # once a second: a store scan, not a per-tick cost
            self._next_expiry_check = now + 1.0
            self._expire(wall)
        self.supervision.release_set_aside(now)
        self.leasing.recheck(now)
        self.scalers.step(now, wall)  # before idle stops: a scheduled minimum that fell lets idle workers go now
        for ep in [*self.endpoints.values(), *set(self.state.leaving.values())]:  # the taken away finish their jobs
            self.supervision.watch(ep, now, wall)
            for worker in planner.idle_stops(ep, now, self.settings.idle_timeout_auto):
                log.info("worker %s of %s idle for %.0fs: stopping it", worker.id, ep.spec.key, now - worker.idle_since)
                self.supervision.stop(worker)
        self.schedules.step(wall)
        self.usage.tick(now)
        self.reconcile()

    def _expire(self, wall: float) -> None:
        """TTL: a job still queued or running at ``expires_at`` ends TIMED_OUT; a finished one is deleted (404)."""
        for job in self.book.expired(wall):
            queued = job.status is JobStatus.IN_QUEUE
            self._end(job, JobStatus.TIMED_OUT, Reason.QUEUE_TTL_EXPIRED if queued else Reason.TTL_EXPIRED)

    async def settled(self) -> None:
        """Return once every reconcile asked for has run and every worker start and stop has reached the backend
        (the test door's way to wait for the plane, instead of sleeping)."""
        while self._kicked or self.supervisor.pending:
            await asyncio.sleep(0)
            await self.supervisor.settle()

    # ----------------------------------------------------------------------------------------------------------------
    # the verbs the plane passes to the collaborator that owns them (the class docstring lists them)

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        self._check_secrets(spec)
        self._check_priority(spec)
        self.registry.register(spec, target, code_file)

    def redeclare(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> int:
        self._check_secrets(spec)
        self._check_priority(spec)
        return self.registry.redeclare(spec, target, code_file)

    def _check_priority(self, spec: EndpointSpec) -> None:
        """An endpoint's priority class must be one this plane knows (a server may define more than the three)."""
        classes = self.settings.priority_classes
        if spec.priority not in classes:
            known = ", ".join(sorted(classes, key=lambda name: -classes[name]))
            raise InvalidEndpointError(
                f"endpoint {spec.key!r} asks for priority class {spec.priority!r}, which this plane does not know; "
                f"use one of {known} (a server adds classes with --priority-class NAME=RANK)"
            )

    async def roll_out(
        self,
        spec: EndpointSpec,
        target: WorkerTarget,
        code_file: str | None = None,
        *,
        timeout_s: float,
        on_stage: Callable[[str, str], None] | None = None,
        together: Together | None = None,
    ) -> None:
        """Make ``spec`` serve as ``spec.key`` without dropping a job or a request (``scheduler/rollout.py``);
        ``on_stage(stage, detail)`` hears ``build``, ``warm`` (``"1/2 ready"``), ``switch``; ``together``: the group
        of rollouts it switches with. Raises ConflictError (a rollout of it runs), RolloutFailed (abandoned: the
        version before serves on), MissingSecretsError."""
        self._check_secrets(spec)
        await self.rollouts.roll_out(spec, target, code_file, timeout_s=timeout_s, on_stage=on_stage, together=together)

    def unregister(self, key: str, *, reason: str) -> int:
        """Take an endpoint away (undeploy; decision 0099): its rollout is abandoned, queued jobs end FAILED with
        ``reason``, held requests get its explanation, it leaves lookups and views now; running jobs finish on their
        workers, which then stop. Returns how many jobs were ended."""
        ep = self.endpoint(key)
        self.rollouts.abandon(ep.spec.key, f"the endpoint was taken away: {reason}")
        ended = len(self.book.queued(ep))
        # FAILED, not CANCELLED: nobody cancelled them, and a caller's error says what happened (decision 0099)
        self.state.fail_queued(ep, Reason.SHUTDOWN, JobError("EndpointRemoved", reason))
        self.routes.give_up_held(ep)
        release_takers(ep, None)
        self.registry.unregister(ep)
        log.info("endpoint %s taken away (%s): %d queued job(s) ended", ep.spec.key, reason, ended)
        return ended

    def _check_secrets(self, spec: EndpointSpec) -> None:
        check_schedule(spec)  # at registration too: a deployed project's specs come back as data
        check_scaling(spec, runs_user_code=self.settings.user_scalers)
        check_secrets(spec, self._secrets)

    async def take(
        self, endpoint: str, worker_id: str, count: int = 1, hold_s: float | None = None, phases: str | None = None
    ) -> list[dict[str, Any]]:
        return await self.protocol.take(endpoint, worker_id, count, hold_s, phases)

    def done(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        self.protocol.done(endpoint, worker_id, job_id, body)

    async def done_batch(
        self,
        endpoint: str,
        worker_id: str,
        results: list[tuple[str, Any]],
        take: int = 0,
        phases: str | None = None,
    ) -> list[dict[str, Any]]:
        return await self.protocol.done_batch(endpoint, worker_id, results, take, phases)

    def chunk(self, endpoint: str, worker_id: str, job_id: str, body: Any) -> None:
        self.protocol.chunk(endpoint, worker_id, job_id, body)

    async def stop_signals(self, endpoint: str, worker_id: str, hold_s: float | None = None) -> list[str]:
        return await self.protocol.stop_signals(endpoint, worker_id, hold_s)

    def ping(self, endpoint: str, worker_id: str, job_ids: list[str] | None = None) -> None:
        self.protocol.ping(endpoint, worker_id, job_ids)

    def output_too_large(self, endpoint: str, worker_id: str, job_id: str, limit: int) -> None:
        self.protocol.output_too_large(endpoint, worker_id, job_id, limit)

    def take_route_worker(self, ep: EndpointState) -> Worker | None:
        return self.routes.take_route_worker(ep)

    async def hold_route_worker(self, ep: EndpointState, timeout_s: float) -> Worker | Explanation:
        return await self.routes.hold_route_worker(ep, timeout_s)

    def release_route_worker(self, ep: EndpointState, worker: Worker, took_s: float | None = None) -> None:
        """The request handed to ``worker`` is answered; ``took_s``: how long it took, its wait for a worker included
        (what ``target_latency_ms`` reads)."""
        self.routes.release_route_worker(ep, worker, took_s)

    def route_secret(self, worker: Worker) -> str:
        return self.routes.route_secret(worker)

    def explain_endpoint(self, name: str) -> Explanation:
        return self.reads.explain_endpoint(name)

    def explain_job(self, job_id: str) -> Explanation:
        return self.reads.explain_job(job_id)

    def health(self, endpoint: str) -> dict[str, Any]:
        return self.reads.health(endpoint)

    def fleet_view(self) -> list[dict[str, Any]]:
        return self.reads.fleet_view()

    def node_view(self) -> list[dict[str, Any]]:
        return self.reads.node_view()

    def endpoint_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        rows = self.reads.endpoint_rows(name)
        for row in rows:  # the cron and next run of a scheduled endpoint (null: none)
            row["schedule"] = self.schedules.summary(self.endpoints[row["name"]])
        return rows

    def gauges(self) -> list[views.EndpointGauges]:
        return self.reads.gauges()

    def list_jobs(
        self, endpoint: str | None = None, status: JobStatus | None = None, limit: int = 100
    ) -> list[JobView]:
        return self.reads.list_jobs(endpoint, status, limit)

    def fleet_summary(self, spec: EndpointSpec | None = None) -> str:
        return self.reads.fleet_summary(spec)
