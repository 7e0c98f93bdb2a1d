"""The control plane: the queue and worker state machine, its lifecycle, and its public verbs.

Everything here runs on one asyncio loop, so the state needs no locks. A worker is placed, not a job: jobs wait in
their endpoint's queue, the plane starts workers where the planner finds devices, and workers pull jobs over HTTP.
The concepts around the state machine live in rooms of their own: the scaling planner (``planner``, pure), worker
supervision (``supervision``), machine-wide device leases (``leasing``, ``leases``), route endpoints' requests and
readiness (``routeserving``, ``readiness``), group commit (``commit``), waiters and listeners (``waiters``), the reads
(``reads``) and their read models (``views``, pure), the records (``records``), the fleet index (``index``) and the
Runpod wire format (``wire``).

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
from flashpoint.errors import InvalidEndpointError, InvalidTransitionError, NotFoundError
from flashpoint.explain import WaitReason
from flashpoint.fleet.inventory import Device, Fleet, fleet_summary, nodes_summary
from flashpoint.jobs import Job, JobError, JobStatus, JobView, Reason
from flashpoint.scheduler import departed, planner, readiness, views, watchdog
from flashpoint.scheduler.credentials import worker_credential
from flashpoint.scheduler.envgate import EnvironmentGate, EnvironmentSource, check_system, system_note
from flashpoint.scheduler.jobbook import JobBook
from flashpoint.scheduler.optionnotes import host_option_notes
from flashpoint.scheduler.ownership.leases import DeviceLeases
from flashpoint.scheduler.placement.fit import NoFit, endpoint_notes
from flashpoint.scheduler.placement.index import FleetIndex
from flashpoint.scheduler.readiness import Probe
from flashpoint.scheduler.reads import PlaneReads
from flashpoint.scheduler.records import EndpointState, Worker
from flashpoint.scheduler.routeserving import not_a_queue_endpoint, oldest_held, same_but_routes
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.scheduler.supervision import Supervisor, WorkerSupervision
from flashpoint.spec import EndpointSpec, WorkerTarget, options_of
from flashpoint.store.base import JobStore

log = logging.getLogger("flashpoint.plane")
worker_log = logging.getLogger("flashpoint.worker")

#: how long a job may go back to the queue because its worker was lost, before it fails with worker_lost
MAX_RETRIES = 1
#: log lines kept per job


class ControlPlane(PlaneReads, WorkerSupervision):
    """Owns queues, workers and the fleet ledger; serves the worker protocol's verbs and the route proxy's."""

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
    ) -> None:
        """``settings`` are the plane's limits and tunables; the rest are what it is built from. ``probe`` asks a
        route worker's ``/ping`` (a test door's is scripted); ``environments`` builds endpoints' environments (the
        environment cache at its default root when None); ``leases`` the machine-wide device leases (this process's,
        in ``leases.lease_dir()``, when None)."""
        self.settings = settings = settings or PlaneSettings()
        self.store = store
        self.clock = clock
        #: never handed out: each worker gets its own credential derived from it (``worker_credential``)
        self._worker_secret = worker_secret.encode()
        self.ping_interval_s = max(1.0, settings.ping_interval_s)
        grace = settings.lost_job_grace_s
        self.lost_job_grace_s = 3 * self.ping_interval_s if grace is None else grace
        self.max_result_bytes = settings.max_result_bytes
        self.tick_s = settings.tick_s
        self.take_hold_s = settings.take_hold_s
        self.stop_grace_s = settings.stop_grace_s
        self.requeue_on_close = settings.requeue_on_close
        self.node = settings.node
        self.index = FleetIndex(backend.devices(), backend.nodes())
        self.endpoints: dict[str, EndpointState] = {}
        self.workers: dict[str, Worker] = {}
        #: every job's record, the queues and their caps, and who waits for a job
        self.book = JobBook(
            store, clock, max_queued_jobs=settings.max_queued_jobs, max_queued_bytes=settings.max_queued_bytes
        )
        self.supervisor = Supervisor(
            backend,
            python=settings.python,
            worker_env=dict(settings.worker_env),
            parent_pid=settings.parent_pid,
            base_url=settings.base_url,
            ping_interval_s=self.ping_interval_s,
            max_result_bytes=settings.max_result_bytes,
            credential=self.worker_credential,
            on_line=self._on_line,
            on_exit=self._on_exit,
            on_not_ready=self._on_not_ready,
            on_serving=self._watch_ready,
            node_of=self.index.nodes.node,
        )
        self._init_routes(probe, settings.route_ready_timeout_s, settings.route_poll_s)
        self._init_leases(leases, url=settings.base_url, server=settings.requeue_on_close)
        #: builds the environments of endpoints with dependencies, unless the backend does (Ray's runtime_env)
        self.envs: EnvironmentGate | None = None
        if not getattr(backend, "builds_environments", False):
            self.envs = EnvironmentGate(
                environments, clock, on_ready=lambda ep: self.kick(), on_failed=self._environment_failed
            )
        #: endpoints the last reconcile left waiting for something
        self._waiting: set[str] = set()
        #: devices passed over until a monotonic time, because a worker placed on them never came up
        self._set_aside: dict[tuple[str, int], tuple[float, Device]] = {}
        #: nodes that left the fleet, by name, until they are back (``departed``): what only they could hold waits
        self.departed: dict[str, departed.Departed] = {}
        #: per endpoint, its candidates only a departed node could hold, and their ``node_away`` reasons
        self._away: dict[str, dict[str, WaitReason]] = {}
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

    def fleet_changed(self, fleet: Fleet) -> None:
        """A node joined or left (a Ray cluster's fleet moves): workers on departed devices or nodes are lost, and
        every endpoint's "can never run" verdict is made again, so a request waiting for a model (or a node large
        enough, in its datacenter) runs once one joins."""
        devices = fleet.devices
        present = {d.key for d in devices}
        before = {d.key for d in self.index.devices}
        nodes = {n.name for n in fleet.nodes}
        now = self.clock.time()
        self.departed = departed.departures(self.departed, self.index.devices, self.index.nodes.nodes, fleet, now)
        self.index.replace(devices, fleet.nodes)
        for key in [k for k in self._set_aside if k not in present]:
            del self._set_aside[key]
        joined, left = len(present - before), len(before - present)
        log.info("fleet changed: %d device(s) joined, %d left; now %s", joined, left, self.fleet_summary())
        for worker in list(self.workers.values()):
            gone = {d.node for d in worker.devices if d.key not in present}
            if worker.cpu is not None and worker.cpu.node not in nodes:
                gone.add(worker.cpu.node)
            if gone:  # a node that is away says why: the loss is the node's, not the worker's
                self._lose(worker, departed.why_lost(sorted(gone), fleet.away))
        for ep in self.endpoints.values():
            waited = bool(self._away.get(ep.spec.name))
            never = self._judge(ep)
            if never is None and ep.never is not None:
                log.info("endpoint %r can run now: the fleet has %s", ep.spec.name, self.fleet_summary())
            elif never is not None and ep.never is None:
                log.warning(self._never_message(ep.spec, never))
            for r in self._away[ep.spec.name].values() if not waited else ():
                log.warning("endpoint %r: %s waits for its node to return: %s", ep.spec.name, r.candidate, r.detail)
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
        await self._close_routes()
        if self.envs is not None:
            await self.envs.close()
        for worker in list(self.workers.values()):
            for job_id in list(worker.jobs):  # async handlers are cancelled through job-stop before SIGTERM
                job = self.store.get(job_id)
                if job is not None and job.status is JobStatus.IN_PROGRESS:
                    if self.requeue_on_close:  # interrupted, not failed: it runs again after a restart
                        self.book.back_to_queue(job, retried=False)
                    else:
                        self._finish(job, JobStatus.CANCELLED, Reason.SHUTDOWN)
                self._signal_stop(worker, job_id)
            self._mark_stopping(worker)
        await asyncio.sleep(0)  # let the stop long-polls answer before the signals go out
        await self.supervisor.close()
        self._close_leases()
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
        return self.book.waiters.listen(callback)

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        """Add an endpoint; ``code_file`` holds its pickled code when ``target`` names no import path or command."""
        existing = self.endpoints.get(spec.name)
        if existing is not None:
            # the functions and classes of one name differ in kind and methods only (spec.options_of); a route
            # endpoint's routes may grow as they are declared: the workers started from then on serve them all
            if same_but_routes(existing.spec, spec):
                existing.spec = spec
            elif options_of(existing.spec) != options_of(spec):
                raise InvalidEndpointError(
                    f"endpoint {spec.name!r} is already registered with other options; declare every function or "
                    "class of one endpoint with the same options, or give each endpoint its own name"
                )
            if target != existing.target:
                # more functions joined a shared name: the workers started from now on load them all
                existing.target = target
                if code_file is not None:
                    self.supervisor.code_files[spec.name] = code_file
            return
        if code_file is not None:
            self.supervisor.code_files.setdefault(spec.name, code_file)
        ep = EndpointState(spec, target, registered_at=self.clock.time())
        ep.never = self._judge(ep)
        if ep.never is not None:
            log.warning(self._never_message(spec, ep.never))
        if self.envs is not None:  # its workers run on this machine: say once what they will lack
            ep.system_missing = check_system(spec)
        self.endpoints[spec.name] = ep
        if spec.serves_routes:
            self.routed[spec.name] = ep
        self.kick()

    def fleet_summary(self, spec: EndpointSpec | None = None) -> str:
        """The fleet in one line: its GPUs; for a CPU endpoint (``spec``), its nodes' CPUs and memory."""
        if spec is not None and not spec.uses_gpu:
            return nodes_summary(self.index.nodes.nodes)
        return fleet_summary(self.index.devices)

    def worker_credential(self, endpoint: str, worker_id: str) -> str:
        """The key of one worker: it opens the worker routes of that endpoint for that worker id only."""
        return worker_credential(self._worker_secret, endpoint, worker_id)

    def _never_message(self, spec: EndpointSpec, nofit: NoFit) -> str:
        return views.never_message(spec, nofit, self.index)

    def _judge(self, ep: EndpointState) -> NoFit | None:
        """The endpoint's "can never run" verdict on this fleet; its candidates only a departed node could hold wait
        for that node (``node_away``) instead."""
        never, away = departed.judge(ep.spec, self.index, self.departed)
        self._away[ep.spec.name] = away
        return never

    def notes(self, spec: EndpointSpec) -> tuple[str, ...]:
        """What the endpoint's options do not do on this fleet, in words (a datacenter no node label can match, a
        volume's directory, Runpod cloud settings recorded and not applied)."""
        ep = self.endpoints.get(spec.name)
        lacking = system_note(ep.system_missing) if ep is not None and ep.system_missing else ()
        return endpoint_notes(spec, self.index) + host_option_notes(spec) + lacking

    def endpoint(self, name: str) -> EndpointState:
        try:
            return self.endpoints[name]
        except KeyError:
            raise NotFoundError(
                f"no endpoint named {name!r}; endpoints: {', '.join(sorted(self.endpoints)) or 'none'}"
            ) from None

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
        ep = self.endpoint(endpoint)
        if ep.spec.serves_routes:
            raise not_a_queue_endpoint(endpoint)
        job = self.book.create(ep, payload, extra, execution_timeout_ms=execution_timeout_ms, ttl_ms=ttl_ms, size=size)
        if self.envs is not None and (failure := self.envs.failed_for_good(ep)) is not None:
            self._finish(job, JobStatus.FAILED, Reason.ENVIRONMENT_FAILED, JobError("EnvironmentBuildError", failure))
            return job
        self._enqueue(ep, job, front=False)
        return job

    def _enqueue(self, ep: EndpointState, job: Job, *, front: bool) -> None:
        self.book.push(ep, job, front=front)
        self._dispatch(ep)
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

    # ----------------------------------------------------------------------------------------------------------------
    # the worker protocol's verbs

    async def read_chunks(self, job_id: str, wait_s: float = 0.0) -> tuple[JobView, list[Any]]:
        """Chunks not yet read (a destructive read), waiting up to ``wait_s`` for one or for the job to end."""
        return await self.book.read_chunks(job_id, wait_s)

    # ----------------------------------------------------------------------------------------------------------------
    # finishing jobs

    def _finish(self, job: Job, status: JobStatus, reason: Reason, error: JobError | None = None) -> None:
        ep = self.endpoints.get(job.endpoint)
        self.book.finish(job, status, reason, error, ep.counters if ep is not None else None)

    def _environment_failed(self, ep: EndpointState, error: str) -> None:
        """The endpoint's environment could not be built: its queued jobs end FAILED with the installer's error."""
        self._fail_queued(ep, Reason.ENVIRONMENT_FAILED, JobError("EnvironmentBuildError", error))
        self.kick()

    def _worker_lost(self, ep: EndpointState, job: Job, what: str) -> None:
        """The retry rule: a job whose worker is lost goes back to the front of the queue once, then fails."""
        if job.retries < MAX_RETRIES:
            log.warning("%s while running job %s; retrying it", what, job.id)
            self.book.back_to_queue(job, retried=True)
            ep.counters["retried"] += 1
            self._enqueue(ep, job, front=True)
        else:
            message = f"{what} while running the job, which had already been retried {job.retries} time(s)"
            self._finish(job, JobStatus.FAILED, Reason.WORKER_LOST, JobError("WorkerLost", message))

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
            wanted=self.wanted_elsewhere,
        )
        if not self.departed:
            return plan
        waiting = {name: departed.with_away(r, self._away.get(name, {})) for name, r in plan.waiting.items()}
        return dataclasses.replace(plan, waiting=waiting)

    def reconcile(self) -> None:
        """Start the workers endpoints want, oldest waiter first; reclaim idle devices for waiters; record why not."""
        if self._closing:
            return
        if self.envs is not None:
            self.envs.start_missing(self.endpoints.values())
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

    # ----------------------------------------------------------------------------------------------------------------
    # the clock

    def tick(self) -> None:
        """One turn of the clock: TTLs, set-aside devices, the watchdog, execution timeouts, idle scale-down, then
        a reconcile. The ticker calls it every ``tick_s``; tests call it after moving a ``FakeClock``."""
        now, wall = self.clock.monotonic(), self.clock.time()
        if now >= self._next_expiry_check:  # once a second: a store scan, not a per-tick cost
            self._next_expiry_check = now + 1.0
            self._expire(wall)
        self._release_set_aside(now)
        self._recheck_leases(now)
        for ep in self.endpoints.values():
            self._watch_workers(ep, now)
            for worker in list(ep.workers.values()):
                for job in watchdog.overdue(worker, self.book.find, wall):
                    self._timeout(job, worker)
            for worker in planner.idle_stops(ep, now):
                log.info(
                    "worker %s of %s idle for %.0fs: stopping it", worker.id, ep.spec.name, now - worker.idle_since
                )
                self._stop_worker(worker)
        self.reconcile()

    def _expire(self, wall: float) -> None:
        """TTL: a job still queued or running at ``expires_at`` ends TIMED_OUT; a finished one is deleted (404)."""
        for job in self.book.expired(wall):
            queued = job.status is JobStatus.IN_QUEUE
            self._end(job, JobStatus.TIMED_OUT, Reason.QUEUE_TTL_EXPIRED if queued else Reason.TTL_EXPIRED)

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

    async def settled(self) -> None:
        """Return once every reconcile asked for has run and every worker start and stop has reached the backend
        (the test door's way to wait for the plane, instead of sleeping)."""
        while self._kicked or self.supervisor.pending:
            await asyncio.sleep(0)
            await self.supervisor.settle()

    def redeclare(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> int:
        """Give an endpoint new options and code (``flashpoint dev`` reloading a changed file); a new one is
        registered. Its queued jobs (a route endpoint: its held requests) stay, for the workers started from now on,
        which load the new code. Each of its workers is retired: it takes nothing new and stops once its running jobs
        (a route worker: its requests in flight) end. Returns how many workers were retired.

        A queue endpoint that now serves routes keeps queued jobs no route worker takes: purge them first.
        """
        ep = self.endpoints.get(spec.name)
        if ep is None:
            self.register(spec, target, code_file)
            return 0
        if self.envs is not None and spec.dependencies != ep.spec.dependencies:
            self.envs.forget(ep)
        ep.spec, ep.target = spec, target
        if code_file is not None:
            self.supervisor.code_files[spec.name] = code_file
        else:
            self.supervisor.code_files.pop(spec.name, None)
        if spec.serves_routes:
            self.routed[spec.name] = ep
        else:
            self.routed.pop(spec.name, None)
        ep.never = self._judge(ep)
        if ep.never is not None:
            log.warning(self._never_message(spec, ep.never))
        # new code starts afresh: no back-off left from the failed starts of the old one
        ep.start_failures = ep.start_losses = 0
        ep.next_start_at = 0.0

        retired = [worker for worker in ep.workers.values() if worker.live]
        for worker in retired:
            worker.retiring = True
            # else the end of its last job (_after_job), or its last request in flight (release_route_worker), stops it
            if not worker.jobs and not worker.in_flight:
                self._stop_worker(worker)
        self.kick()
        return len(retired)
