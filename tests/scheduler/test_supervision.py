"""Worker supervision alone (``WorkerSupervision``), on a bare plane state and the stub backend through the test door:
a started worker holds its devices and their leases; a launch that cannot be built leaves nothing behind; a failed
start backs off and, past ``MAX_START_ATTEMPTS``, fails the queue; a worker killed from outside before its first pull
is only lost; a gone worker's running jobs go to the retry rule (``job_lost``); the watchdog's findings (a dropped
job, a job past its timeout) and a departed device are applied.

Covers ``flashpoint.scheduler.watchdog`` (the watchdog's findings) for tests/test_layout.py."""

from __future__ import annotations

import signal
from pathlib import Path

from flashpoint import GpuType
from flashpoint.backends.stub import StubBackend
from flashpoint.fleet.inventory import Fleet
from flashpoint.jobs import Job, JobStatus, Reason
from flashpoint.scheduler import planner
from flashpoint.scheduler.ownership.leases import DeviceLeases, Owner
from flashpoint.scheduler.ownership.leasing import DeviceLeasing
from flashpoint.scheduler.placement.fit import Fit, place
from flashpoint.scheduler.reads import PlaneReads
from flashpoint.scheduler.records import EndpointState, Worker, WorkerState
from flashpoint.scheduler.routeserving import RouteServing
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.scheduler.state import PlaneState
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS, WorkerSupervision, failed_start_delay
from flashpoint.spec import WorkerTarget
from tests.scheduler.door import BASE_URL, add_endpoint, plane_state


class Supervised:
    """A ``WorkerSupervision`` on a bare state and a stub backend, recording the jobs it hands to the retry rule."""

    def __init__(self, root: Path) -> None:
        self.state: PlaneState = plane_state("node-a=NVIDIA_H200:2")
        self.backend = StubBackend(self.state.index.devices)
        self.lost: list[tuple[str, str]] = []
        self.kicks = 0
        leases = DeviceLeases(Owner.this_process("script", BASE_URL), root)
        self.leasing = DeviceLeasing(self.state, leases, url=BASE_URL, server=False, kick=self.kick)
        reads = PlaneReads(self.state, plan=lambda: planner.Plan(starts=(), reclaims=(), waiting={}))
        routes = RouteServing(
            self.state,
            probe=self.backend.probe,
            ready_timeout_s=30.0,
            poll_s=(0.0, 0.0),
            credential=self.credential,
            explain=reads.explain_endpoint,
            stop_worker=lambda worker: self.supervision.stop(worker),
            failed_start=lambda worker, why: self.supervision.fail_start(worker, why),
            kick=self.kick,
            kick_if_someone_waits=self.kick,
        )
        self.supervision = WorkerSupervision(
            self.state,
            self.backend,
            PlaneSettings(stop_grace_s=5.0, ping_interval_s=10.0),
            credential=self.credential,
            leasing=self.leasing,
            routes=routes,
            job_lost=self.job_lost,
            kick=self.kick,
            kick_if_someone_waits=self.kick,
        )
        self.ep: EndpointState = add_endpoint(self.state, name="e", gpu=GpuType.NVIDIA_H200)

    @staticmethod
    def credential(endpoint: str, worker_id: str) -> str:
        return f"key-{worker_id}"

    def kick(self) -> None:
        self.kicks += 1

    def job_lost(self, ep: EndpointState, job: Job, what: str, preempted: bool) -> None:
        assert not preempted  # none of these workers was preempted
        self.lost.append((job.id, what))

    async def start(self) -> Worker:
        """Start one worker of ``e`` on the first free H200, and let its start reach the backend."""
        fit = place(self.ep.spec.candidates, 1, self.state.index)
        assert isinstance(fit, Fit)
        before = set(self.state.workers)
        self.supervision.start(self.ep, fit)
        await self.supervision.supervisor.settle()
        (started,) = set(self.state.workers) - before
        return self.state.workers[started]

    def running(self, worker: Worker) -> Job:
        """A job of ``e`` that ``worker`` runs now."""
        book = self.state.book
        job = book.create(self.ep, {}, None, execution_timeout_ms=None, ttl_ms=None, size=0)
        book.taken(job, worker.id, worker.placement())
        worker.jobs = worker.jobs | {job.id}
        worker.state = WorkerState.RUNNING
        return job


async def test_a_started_worker_holds_its_devices_and_their_leases_and_gives_them_back_when_gone(
    tmp_path: Path,
) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    (device,) = worker.devices
    assert s.backend.started == [worker.id] and worker.state is WorkerState.STARTING
    assert not s.state.index.is_free(device) and s.leasing.leases.held()
    job = s.running(worker)
    s.backend.exit(worker.id, -signal.SIGKILL)
    assert worker.id not in s.state.workers and s.state.index.is_free(device)
    assert s.leasing.leases.held() == ()
    assert [job_id for job_id, _ in s.lost] == [job.id]


async def test_a_launch_that_cannot_be_built_leaves_nothing_behind_and_counts_as_a_failed_start(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    s.ep.target = WorkerTarget()  # no import path, no command, no code file: no command line can be made
    fit = place(s.ep.spec.candidates, 1, s.state.index)
    assert isinstance(fit, Fit)
    s.supervision.start(s.ep, fit)
    assert s.state.workers == {} and s.backend.started == [] and all(s.state.index.is_free(d) for d in fit.devices)
    assert s.ep.start_failures == 1 and "no code file" in s.ep.last_start_error


async def test_failed_starts_back_off_and_past_the_limit_fail_the_queued_jobs(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    queued = s.state.book.create(s.ep, {}, None, execution_timeout_ms=None, ttl_ms=None, size=0)
    s.state.book.push(s.ep, queued, front=False)
    for attempt in range(1, MAX_START_ATTEMPTS + 1):
        worker = await s.start()
        s.backend.exit(worker.id, 1)  # it failed by itself, before its first pull
        assert s.ep.start_failures == attempt
        assert s.ep.next_start_at == s.state.clock.monotonic() + failed_start_delay(attempt)
    assert queued.status is JobStatus.FAILED and queued.reason is Reason.WORKER_START_FAILED


async def test_a_starting_worker_killed_from_outside_is_lost_not_failed(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    s.backend.exit(worker.id, -signal.SIGKILL)
    assert s.ep.start_failures == 0 and s.ep.start_losses == 1 and s.ep.next_start_at > s.state.clock.monotonic()


async def test_after_its_last_job_a_worker_is_idle_and_a_retiring_one_stops(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    job = s.running(worker)
    worker.jobs = worker.jobs - {job.id}
    s.state.clock.advance(2.0)
    s.supervision.after_job(worker)
    assert worker.state is WorkerState.IDLE and worker.idle_since == s.state.clock.monotonic()
    other = s.running(worker)
    worker.jobs = worker.jobs - {other.id}
    s.supervision.after_job(worker, stop_pod=True)  # the handler asked for stopPod
    await s.supervision.supervisor.settle()
    assert s.backend.stopped == [worker.id] and worker.id not in s.state.workers


async def test_the_watchdog_gives_a_dropped_job_to_the_retry_rule_and_loses_a_wedged_worker(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    job = s.running(worker)
    worker.ever_ready = True
    worker.unnamed[job.id] = s.state.clock.monotonic()
    s.state.clock.advance(s.supervision.lost_job_grace_s)
    worker.last_exchange = s.state.clock.monotonic()  # it went on working after: only the job was dropped
    s.supervision.watch(s.ep, s.state.clock.monotonic(), s.state.clock.time())
    assert [job_id for job_id, _ in s.lost] == [job.id] and worker.id in s.state.workers
    assert worker.to_stop == [job.id]
    wedged = s.running(worker)
    s.state.clock.advance(1.0)  # then its pings leave out its next job, and it takes and posts nothing more
    worker.unnamed[wedged.id] = s.state.clock.monotonic()
    s.state.clock.advance(s.supervision.lost_job_grace_s)
    s.supervision.watch(s.ep, s.state.clock.monotonic(), s.state.clock.time())
    assert worker.id not in s.state.workers and [job_id for job_id, _ in s.lost] == [job.id, wedged.id]


async def test_a_job_past_its_execution_timeout_times_out_and_its_worker_is_replaced(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    job = s.running(worker)
    job.execution_timeout_ms = 1000
    s.state.clock.advance(1.0)
    s.supervision.watch(s.ep, s.state.clock.monotonic(), s.state.clock.time())
    await s.supervision.supervisor.settle()
    assert job.status is JobStatus.TIMED_OUT and job.reason is Reason.EXECUTION_TIMEOUT
    assert worker.retiring and s.backend.stopped == [worker.id] and s.lost == []


async def test_a_worker_whose_device_left_the_fleet_is_lost(tmp_path: Path) -> None:
    s = Supervised(tmp_path)
    worker = await s.start()
    job = s.running(worker)
    (device,) = worker.devices
    remaining = tuple(d for d in s.state.index.devices if d.key != device.key)
    s.supervision.lose_departed(Fleet.of(remaining, s.state.index.nodes.nodes))
    assert worker.id not in s.state.workers and [job_id for job_id, _ in s.lost] == [job.id]
