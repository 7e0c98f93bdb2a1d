"""Worker supervision: the plane's side of a worker's life (``WorkerSupervision``, a collaborator of ``ControlPlane``,
starting and stopping workers through the ``Supervisor`` of ``launcher.py``, which knows what each is started with):
recording a
started worker and its devices, its output lines, its exit, the back-off after a start that failed or was killed,
devices set aside, the watchdog's findings (jobs dropped, jobs past their execution timeout), stopping it and
forgetting it once gone.

The planner decides which worker to start where; this room carries it out, taking the devices' machine-wide leases
first (``leasing``), and applies the watchdog's findings. Invariants:
- a worker's launch (command and environment) is built before the plane records the worker, so a launch that
  cannot be built leaves nothing behind (no phantom starting worker holding devices);
- every task it starts is kept until it ends, so none is collected mid-flight, and ``close`` waits for them;
- a worker that is gone gives its devices back and its running jobs follow the retry rule, once;
- only the worker that ran a job writes to that job's log.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from flashpoint.backends.base import Backend
from flashpoint.errors import BackendError, NotReadyError
from flashpoint.fleet.inventory import Device, Fleet, Holder
from flashpoint.jobs import LOG_CUT, MAX_JOB_LOG_LINES, Job, JobError, JobStatus, Reason
from flashpoint.scheduler import departed, watchdog
from flashpoint.scheduler.exits import describe_exit, failed_by_itself
from flashpoint.scheduler.launcher import PLANE_CREDENTIALS as PLANE_CREDENTIALS, AppSecrets, Supervisor, no_app_secrets
from flashpoint.scheduler.ownership.leasing import DeviceLeasing
from flashpoint.scheduler.placement.fit import CpuFit, Fit
from flashpoint.scheduler.protocol import release_takers, signal_stop
from flashpoint.scheduler.records import EndpointState, Staged, Worker, WorkerState
from flashpoint.scheduler.routeserving import RouteServing
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.scheduler.state import PlaneState
from flashpoint.scheduler.waiters import wake
from flashpoint.terminal import inert
from flashpoint.wire import protocol
from flashpoint.wire.protocol import line_level

log = logging.getLogger("flashpoint.plane")
worker_log = logging.getLogger("flashpoint.worker")

#: a worker that exits before it ever pulled counts as a failed start; after this many in a row, queued jobs fail
MAX_START_ATTEMPTS = 5
#: how long devices whose worker never came up (a Ray actor not ready in time) are passed over by placement
SET_ASIDE_S = 60.0
#: what explanations name as the holder of devices set aside
SET_ASIDE = "(set aside: a worker placed there was not ready in time)"
#: the longest pause before starting again after a starting worker was killed from outside (not a failed start)
LOST_START_BACKOFF_MAX_S = 5.0
#: the longest pause after failed starts
FAILED_START_BACKOFF_MAX_S = 30.0


def failed_start_delay(failures: int) -> float:
    """The pause before the next start after ``failures`` failed starts in a row: 0.5 s doubling to 30 s."""
    return min(0.5 * 2.0 ** (failures - 1), FAILED_START_BACKOFF_MAX_S)


def lost_start_delay(losses: int) -> float:
    """The pause after ``losses`` starting workers were killed from outside in a row: 0.5 s doubling to 5 s, so a
    kill loop (say, the OOM killer) does not spin."""
    return min(0.5 * 2.0 ** (losses - 1), LOST_START_BACKOFF_MAX_S)


class WorkerSupervision:
    """The plane's side of a worker's life, over the plane's ``state``: it starts workers where the planner placed
    them (their devices' leases first, through ``leasing``), hears their lines and exits through the ``Supervisor`` it
    owns, applies the watchdog's findings, and stops and forgets them. A route worker's readiness is ``routes``'
    (a started one is handed to it; its held requests are answered when no worker can start)."""

    def __init__(
        self,
        state: PlaneState,
        backend: Backend,
        settings: PlaneSettings,
        *,
        credential: Callable[[str, str], str],
        leasing: DeviceLeasing,
        routes: RouteServing,
        job_lost: Callable[[EndpointState, Job, str, bool], None],
        kick: Callable[[], None],
        kick_if_someone_waits: Callable[[], None],
        secrets: AppSecrets = no_app_secrets,
    ) -> None:
        """``credential(endpoint, worker id)`` is a worker's key; ``secrets`` gives the values of the secrets an
        endpoint's env names (its app's resolver), at each launch; ``job_lost(ep, job, what)`` applies the retry rule
        to a running job whose worker is gone; ``kick`` asks for a reconcile, ``kick_if_someone_waits`` for one only
        while an endpoint waits for devices."""
        self._state = state
        self._leasing = leasing
        self._routes = routes
        self._job_lost = job_lost
        self._kick = kick
        self._kick_if_someone_waits = kick_if_someone_waits
        ping_interval_s = max(1.0, settings.ping_interval_s)
        grace = settings.lost_job_grace_s
        #: how long a worker's pings may leave out a job it holds before the worker counts as lost
        self.lost_job_grace_s = 3 * ping_interval_s if grace is None else grace
        #: seconds between SIGTERM and SIGKILL when a worker is stopped
        self.stop_grace_s = settings.stop_grace_s
        self.supervisor = Supervisor(
            backend,
            python=settings.python,
            worker_env=dict(settings.worker_env),
            parent_pid=settings.parent_pid,
            base_url=settings.base_url,
            ping_interval_s=ping_interval_s,
            max_result_bytes=settings.max_result_bytes,
            credential=credential,
            on_line=self._on_line,
            on_exit=self._on_exit,
            on_not_ready=self._on_not_ready,
            on_serving=routes.watch_ready,
            node_of=state.index.nodes.node,
            secrets=secrets,
        )
        #: devices passed over until a monotonic time, because a worker placed on them never came up
        self.set_aside: dict[tuple[str, int], tuple[float, Device]] = {}

    def start(self, ep: EndpointState, fit: Fit | CpuFit, staged: Staged | None = None) -> None:
        """Start a worker of ``ep`` on ``fit``; with ``staged``, one of the rollout's next generation (``standby``:
        started with that generation's spec, target and code, taking nothing until the switch)."""
        devices = fit.devices if isinstance(fit, Fit) else ()
        cpu = fit.slot if isinstance(fit, CpuFit) else None
        now = self._state.clock.monotonic()
        worker = Worker(
            id=f"{ep.spec.key}-w{ep.worker_seq + 1}-{secrets.token_hex(3)}",
            endpoint=ep.spec.key,
            devices=devices,
            node=fit.node,
            cpu=cpu,
            cpu_instance=fit.request.name if isinstance(fit, CpuFit) else None,
            started_at=now,
            idle_since=now,
            last_exchange=now,
            generation=ep.generation if staged is None else staged.number,
            standby=staged is not None,
        )
        try:  # built before the worker is recorded: if it cannot be, nothing holds the devices
            if staged is None:
                launch = self.supervisor.launch(ep, worker)
            else:
                launch = self.supervisor.launch(staged.record, worker, staged.code_file)
        except BackendError as exc:
            worker.stderr_tail.append(str(exc))
            self._start_failed(staged.record if staged is not None else ep, worker, -1)
            return
        if devices and not self._leasing.take(worker):
            return  # another process holds one: the index holds it for that process, and a reconcile places again
        ep.worker_seq += 1
        self._state.workers[worker.id] = worker
        ep.workers[worker.id] = worker
        if devices:
            self._state.index.hold(devices, Holder(worker.id, ep.spec.key))
        if cpu is not None:
            self._state.index.nodes.reserve(cpu, Holder(worker.id, ep.spec.key))
        self._state.usage.started(worker, ep.spec)
        if isinstance(fit, CpuFit):
            where = f"{fit.node}: {fit.request.name} (cores {', '.join(map(str, fit.slot.cores))})"
        else:
            where = f"{worker.placement().gpu_model} {list(worker.placement().device_ids)}"
        log.info("starting worker %s for %s on %s", worker.id, ep.spec.key, where)
        self.supervisor.start(worker, launch)

    def stop(self, worker: Worker, grace_s: float | None = None) -> None:
        if worker.state is WorkerState.STOPPING:
            return
        self.mark_stopping(worker)
        self.supervisor.stop(worker.id, self.stop_grace_s if grace_s is None else grace_s)

    def preempt(self, worker: Worker, for_endpoint: str, grace_s: float) -> None:
        """Stop ``worker`` for ``for_endpoint`` (a higher class): asked to stop now, killed after ``grace_s``; a job
        that ends meanwhile ends as it would, the others go back to their queue as ``preempted`` when it is gone."""
        if worker.state is WorkerState.STOPPING:
            return
        log.info(
            "preempting worker %s of %s for %s (a higher priority class); it has %.0fs to stop",
            worker.id,
            worker.endpoint,
            for_endpoint,
            grace_s,
        )
        worker.preempted_for = worker.stopping_for = for_endpoint
        self.stop(worker, grace_s)

    def mark_stopping(self, worker: Worker) -> None:
        worker.state = WorkerState.STOPPING
        self._state.usage.observe(worker)
        wake(worker)  # answer its job-stop long-poll: the worker can exit at once
        ep = self._state.endpoints.get(worker.endpoint)
        if ep is not None:
            release_takers(ep, worker.id)

    def _on_line(self, worker_id: str, channel: str, line: str) -> None:
        worker = self._state.workers.get(worker_id)
        job_id, line = protocol.untag_line(line)
        if worker is not None and channel == "stderr":
            worker.stderr_tail.append(line)
        if job_id:
            job = self._state.book.find(job_id)
            # only the worker that ran the job writes to its log
            if job is not None and job.worker_id == worker_id and len(job.logs) < MAX_JOB_LOG_LINES:
                # the last line kept says the log was cut, so every reader of it (API, CLI, dashboard) knows
                job.logs.append(line if len(job.logs) < MAX_JOB_LOG_LINES - 1 else LOG_CUT)
                if job.status.terminal:  # a running job's lines are written with its next change
                    self._state.book.save(job)
        endpoint = worker.endpoint if worker else "?"
        # at the level Runpod's logger printed it (console.py): a worker's DEBUG lines stay off an INFO console; inert
        # whatever handler prints it (terminal.py): a server's worker prints what its jobs hold
        worker_log.log(
            line_level(line), "[%s %s] %s", endpoint, f"job={job_id}" if job_id else f"worker={worker_id}", inert(line)
        )

    def _on_exit(self, worker_id: str, code: int, failed: bool | None = None, cause: str = "") -> None:
        """A worker process ended. Before its first pull that is a failed start only if it ``failed`` by itself
        (by default: judged from ``code``, see ``scheduler.exits``); a worker killed from outside is only lost.
        ``cause``: what the backend says happened, when it lost sight of the process (then no signal is meant)."""
        worker = self._state.workers.get(worker_id)
        if worker is None:
            return
        expected = worker.state is WorkerState.STOPPING
        taken_away = worker_id in self._state.leaving  # its endpoint was unregistered
        how = describe_exit(code, cause)
        self._forget(worker, f"worker {worker_id} ended ({how})")
        if expected or taken_away or self._state.closing:
            return
        ep = self._counted(worker)
        if worker.ever_ready:
            log.warning("worker %s of %s ended unexpectedly (%s)", worker_id, worker.endpoint, how)
        elif failed_by_itself(code) if failed is None else failed:
            self._start_failed(ep, worker, code)
        else:
            self._start_lost(ep, worker, how)

    def _on_not_ready(self, worker: Worker, exc: NotReadyError) -> None:
        """The worker's place never came up (a Ray actor not ready in time): not the endpoint's fault. Its devices
        are passed over for a while, and the next worker goes to the next candidate."""
        worker.state = WorkerState.STOPPING
        self._on_exit(worker.id, -1, cause="its place never came up")
        until = self._state.clock.monotonic() + SET_ASIDE_S
        index = self._state.index
        aside = [d for d in worker.devices if d in index and index.is_free(d)]  # a node gone: none
        for device in aside:
            index.hold((device,), Holder("", SET_ASIDE))
            self.set_aside[device.key] = (until, device)
        if aside:
            log.warning("%s; passing those devices over for %.0fs", exc, SET_ASIDE_S)
        else:  # they left the fleet (their node is away): nothing to pass over
            log.warning("%s", exc)

    def after_job(self, worker: Worker, stop_pod: bool = False) -> None:
        """One of the worker's jobs ended (its result came, it was cancelled, it was dropped): with none left it is
        idle, and a retiring one (or one whose handler asked for ``stopPod``, or a single-use one that has had its
        job) stops: a normal stop, its exit expected (no crash, no back-off)."""
        if stop_pod:
            worker.retiring = True
        ep = self._state.endpoints.get(worker.endpoint)
        if ep is not None:
            ep.traffic.ended(self._state.clock.monotonic())
        if not worker.jobs and worker.state is WorkerState.RUNNING:
            worker.state = WorkerState.IDLE
            worker.idle_since = self._state.clock.monotonic()
        self._state.usage.observe(worker)
        if (worker.retiring or worker.spent) and not worker.jobs:
            self.stop(worker)
        self._kick_if_someone_waits()

    def watch(self, ep: EndpointState, now: float, wall: float) -> None:
        """The watchdog's turn for ``ep``'s workers (``now`` monotonic, ``wall`` the wall clock): jobs dropped
        (``_watch_dropped``), then jobs past their execution timeout (``_timeout``)."""
        self._watch_dropped(ep, now)
        for worker in list(ep.workers.values()):
            for job in watchdog.overdue(worker, self._state.book.find, wall):
                self._timeout(job, worker)

    def _watch_dropped(self, ep: EndpointState, now: float) -> None:
        """The watchdog, for jobs a worker holds but its pings have left out for ``lost_job_grace_s`` (it neither
        runs them nor posted their results). A worker that has not taken or posted anything since is wedged: it is
        lost, and its jobs follow the retry rule. One that goes on working only dropped those jobs: they follow the
        retry rule (and the worker is told to stop them, should it still have them), and it keeps serving."""
        for worker in list(ep.workers.values()):
            found = watchdog.dropped(worker, now, self.lost_job_grace_s)
            if found is None:
                continue
            if found.wedged:
                self.lose(
                    worker,
                    f"it holds job(s) {', '.join(found.jobs)} that its pings have not named for "
                    f"{now - found.since:.0f}s, and has taken and posted nothing since",
                )
                continue
            for job_id in found.jobs:
                worker.unnamed.pop(job_id, None)
                signal_stop(worker, job_id)
                job = self._state.book.find(job_id)
                if job is not None and job.status is JobStatus.IN_PROGRESS:
                    self._job_lost(ep, job, f"worker {worker.id} dropped the job (its pings stopped naming it)", False)
            self.after_job(worker)

    def _timeout(self, job: Job, worker: Worker) -> None:
        log.warning(
            "job %s ran past its execution timeout of %d ms; replacing worker %s",
            job.id,
            job.execution_timeout_ms,
            worker.id,
        )
        self._state.finish(
            job,
            JobStatus.TIMED_OUT,
            Reason.EXECUTION_TIMEOUT,
            JobError("TimeoutError", f"execution exceeded {job.execution_timeout_ms} ms"),
        )
        signal_stop(worker, job.id)
        self._state.usage.observe(worker)
        # a sync handler cannot be interrupted: the worker is replaced, once its other jobs are done
        worker.retiring = True
        if not worker.jobs:
            self.stop(worker, grace_s=1.0)
        self._kick()

    def lose_departed(self, fleet: Fleet) -> None:
        """The fleet moved: devices set aside that left it are forgotten, and a worker on a device or node that left
        is lost (a node that is away says why: the loss is the node's, not the worker's)."""
        present = {d.key for d in fleet.devices}
        nodes = {n.name for n in fleet.nodes}
        for key in [k for k in self.set_aside if k not in present]:
            del self.set_aside[key]
        for worker in list(self._state.workers.values()):
            gone = {d.node for d in worker.devices if d.key not in present}
            if worker.cpu is not None and worker.cpu.node not in nodes:
                gone.add(worker.cpu.node)
            if gone:
                self.lose(worker, departed.why_lost(sorted(gone), fleet.away))

    def lose(self, worker: Worker, why: str) -> None:
        """A worker given up on (its devices left the fleet; it is wedged): its jobs follow the retry rule now, and
        its process is ended."""
        log.warning("worker %s of %s is lost: %s", worker.id, worker.endpoint, why)
        self.mark_stopping(worker)
        self._forget(worker, f"worker {worker.id} was lost ({why})")
        self.supervisor.stop(worker.id, 0.0)

    def fail_start(self, worker: Worker, why: str) -> None:
        """A starting worker given up on (a route worker not ready in time): it is lost now, and counts as a failed
        start, so the back-off and the explanation, its held requests' included, are a failed start's."""
        self.lose(worker, why)
        self._start_failed(self._counted(worker), worker, -1)

    def _counted(self, worker: Worker) -> EndpointState:
        """The record a starting worker's failed start counts against: its endpoint's, or for a rollout's standby
        worker the staged generation's (a new version that cannot start must not fail the old one's queue)."""
        ep = self._state.endpoints[worker.endpoint]
        return ep.staged.record if worker.standby and ep.staged is not None else ep

    def _forget(self, worker: Worker, what: str) -> None:
        """Drop a worker that is gone; its devices return, its running jobs go back under the retry rule."""
        self._state.workers.pop(worker.id, None)
        self._state.usage.gone(worker)
        ep = self._state.leaving.pop(worker.id, None) or self._state.endpoints[worker.endpoint]
        ep.workers.pop(worker.id, None)
        self._state.index.release(worker.devices)
        self._leasing.release(worker)
        if worker.cpu is not None:
            self._state.index.nodes.release(Holder(worker.id, worker.endpoint))
        wake(worker)
        for job_id in sorted(worker.jobs):
            job = self._state.book.find(job_id)
            if job is not None and job.status is JobStatus.IN_PROGRESS:
                if worker.preempted_for is not None:
                    self._job_lost(ep, job, f"worker {worker.id} was preempted for {worker.preempted_for}", True)
                else:
                    self._job_lost(ep, job, what, False)
        self._kick()

    def _start_failed(self, ep: EndpointState, worker: Worker, code: int) -> None:
        ep.start_failures += 1
        ep.last_start_error = "\n".join(worker.stderr_tail)[-2000:] or f"exit code {code}"
        ep.next_start_at = self._state.clock.monotonic() + failed_start_delay(ep.start_failures)
        log.error(
            "worker %s of %s failed (code %s) before it was ready (attempt %d of %d):\n%s",
            worker.id,
            ep.spec.key,
            code,
            ep.start_failures,
            MAX_START_ATTEMPTS,
            ep.last_start_error,
        )
        if worker.environment_failed:  # the same requirements fail the same way: no attempt more helps the queue
            self._state.fail_queued(
                ep, Reason.ENVIRONMENT_FAILED, JobError("EnvironmentSetupError", ep.last_start_error)
            )
            self._routes.give_up_held(ep)
        elif ep.start_failures >= MAX_START_ATTEMPTS:
            error = JobError(
                "WorkerStartFailed",
                f"no worker of {ep.spec.key!r} could start "
                f"({ep.start_failures} attempts); last error:\n{ep.last_start_error}",
            )
            self._state.fail_queued(ep, Reason.WORKER_START_FAILED, error)
            self._routes.give_up_held(ep)  # a route endpoint's held requests are answered now, with the explanation

    def _start_lost(self, ep: EndpointState, worker: Worker, how: str) -> None:
        """A starting worker killed from outside: not its handler's fault, so no failed start is counted and the
        queued jobs wait for the next worker; a short back-off keeps a kill loop (say, OOM) from spinning."""
        ep.start_losses += 1
        delay = lost_start_delay(ep.start_losses)
        ep.next_start_at = max(ep.next_start_at, self._state.clock.monotonic() + delay)
        log.warning(
            "worker %s of %s ended before taking a job (%s); starting another in %.1fs (not counted as a failed start)",
            worker.id,
            ep.spec.key,
            how,
            delay,
        )

    def release_set_aside(self, now: float) -> None:
        """Devices set aside until ``now`` (monotonic) or earlier go back to placement."""
        for key, (until, device) in list(self.set_aside.items()):
            if until <= now:
                del self.set_aside[key]
                self._state.index.release((device,))
