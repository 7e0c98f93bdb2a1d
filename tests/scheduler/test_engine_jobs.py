"""Job rules through the test door (StubBackend + FakeClock): the retry rule, start back-off, TTL, execution
timeout, cancel and purge, fleet changes, the engine's invariants, and defects that once hid in it."""

from __future__ import annotations

import asyncio
import gc
import signal
import weakref
from typing import Any

from flashpoint import GpuType
from flashpoint.backends.base import ExitCallback, Launch, LineCallback, Started
from flashpoint.backends.stub import StubBackend
from flashpoint.clock import FakeClock
from flashpoint.fleet.simulated import parse_fleet
from flashpoint.jobs import JobStatus, JobView, Reason
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.records import WorkerState
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS
from flashpoint.spec import WorkerTarget
from flashpoint.store.memory import MemoryJobStore
from tests.scheduler.door import open_door

# ---------------------------------------------------------------------------------------------------------------------
# the retry rule


async def test_a_job_whose_worker_dies_runs_again_once_at_the_front_then_fails_worker_lost() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job = door.submit("e")
    later = door.submit("e")
    await door.settle()
    first = door.worker("e")
    assert await door.pull(first) == [job.id]
    await door.crash(first)
    assert job.status is JobStatus.IN_QUEUE and job.retries == 1
    second = door.worker("e")
    assert await door.pull(second) == [job.id]  # back at the front, before the job queued after it
    await door.crash(second)
    assert job.status is JobStatus.FAILED and job.reason is Reason.WORKER_LOST
    assert job.error is not None and "already been retried 1 time(s)" in job.error.message
    assert later.status is JobStatus.IN_QUEUE
    assert door.plane.endpoint("e").counters["retried"] == 1


# ---------------------------------------------------------------------------------------------------------------------
# start back-off


async def test_failed_starts_back_off_doubling_and_fail_the_queue_after_the_limit() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job = door.submit("e")
    await door.settle()
    delays = []
    for attempt in range(1, MAX_START_ATTEMPTS + 1):
        worker = door.worker("e")
        door.backend.line(worker.id, "stderr", f"boom {attempt}")
        await door.crash(worker, 1)  # exits by itself before its first pull: a failed start
        if attempt == MAX_START_ATTEMPTS:
            break
        waited = 0.0
        while len(door.backend.started) == attempt:
            await door.step(0.25)
            waited += 0.25
        delays.append(waited)
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert job.status is JobStatus.FAILED and job.reason is Reason.WORKER_START_FAILED
    assert job.error is not None and f"boom {MAX_START_ATTEMPTS}" in job.error.message


async def test_a_ready_worker_resets_the_failed_start_count() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    door.submit("e")
    await door.settle()
    await door.crash(door.worker("e"), 1)
    await door.step(0.5)
    await door.pull(door.worker("e"))
    assert door.plane.endpoint("e").start_failures == 0


async def test_starting_workers_killed_from_outside_delay_but_never_fail_the_queue() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job = door.submit("e")
    await door.settle()
    for kill in [signal.SIGKILL, signal.SIGTERM] * MAX_START_ATTEMPTS:
        await door.crash(door.worker("e"), -kill)
        await door.step(5)  # the longest pause after a kill
    assert job.status is JobStatus.IN_QUEUE
    assert door.plane.endpoint("e").start_failures == 0
    assert len(door.backend.started) == 2 * MAX_START_ATTEMPTS + 1


# ---------------------------------------------------------------------------------------------------------------------
# TTL and execution timeout


async def test_ttl_times_out_a_queued_job_and_a_running_one_and_deletes_a_finished_one() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    running = door.submit("e", ttl_ms=10_000)
    queued = door.submit("e", ttl_ms=10_000)
    done = door.submit("e", ttl_ms=60_000)
    await door.settle()
    worker = door.worker("e")
    assert await door.pull(worker) == [running.id]
    await door.step(10)
    assert (queued.status, queued.reason) == (JobStatus.TIMED_OUT, Reason.QUEUE_TTL_EXPIRED)
    assert (running.status, running.reason) == (JobStatus.TIMED_OUT, Reason.TTL_EXPIRED)
    assert running.id in worker.to_stop  # the worker is told to stop it
    assert await door.pull(worker) == [done.id]
    await door.finish(worker, done.id)
    await door.step(50)
    assert door.plane.store.get(done.id) is None


async def test_execution_timeout_ends_the_job_and_replaces_its_worker() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, execution_timeout_ms=2_000)
    job = door.submit("e")
    nxt = door.submit("e")
    await door.settle()
    worker = door.worker("e")
    await door.pull(worker)
    await door.step(1.9)
    assert job.status is JobStatus.IN_PROGRESS
    await door.step(0.1)
    assert (job.status, job.reason) == (JobStatus.TIMED_OUT, Reason.EXECUTION_TIMEOUT)
    assert door.backend.workers[worker.id].stops == [1.0]  # a sync handler cannot be interrupted: SIGTERM, 1 s
    replacement = door.worker("e")
    assert replacement.id != worker.id and await door.pull(replacement) == [nxt.id]


# ---------------------------------------------------------------------------------------------------------------------
# cancel and purge


async def test_cancel_of_a_queued_job_is_skipped_when_its_turn_comes() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    first, second = door.submit("e"), door.submit("e")
    door.plane.cancel(first.id)
    assert first.status is JobStatus.CANCELLED and door.plane.endpoint("e").queued == 1
    assert first.id in door.plane.endpoint("e").queue  # left in place: cancel is O(1)
    await door.settle()
    assert await door.pull(door.worker("e"), 2) == [second.id]


async def test_cancel_of_a_running_job_reaches_its_worker_and_the_worker_keeps_serving() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job, nxt = door.submit("e"), door.submit("e")
    await door.settle()
    worker = door.worker("e")
    await door.pull(worker)
    door.plane.cancel(job.id)
    assert await door.plane.stop_signals("e", worker.id, hold_s=0) == [job.id]
    door.plane.done("e", worker.id, job.id, {"output": "late"})  # a late result changes nothing
    assert job.status is JobStatus.CANCELLED and job.output is None
    assert await door.pull(worker) == [nxt.id]


async def test_purge_cancels_queued_jobs_and_leaves_running_ones() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    running, *queued = [door.submit("e") for _ in range(4)]
    await door.settle()
    await door.pull(door.worker("e"))
    assert door.plane.purge("e") == 3
    assert [j.reason for j in queued] == [Reason.PURGED] * 3
    assert running.status is JobStatus.IN_PROGRESS
    assert door.plane.book.queued_jobs == 0


# ---------------------------------------------------------------------------------------------------------------------
# fleet changes


async def test_a_node_joining_ends_a_never_verdict_and_its_devices_are_used() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="big", gpu=GpuType.NVIDIA_B200)
    door.submit("big")
    await door.settle()
    assert door.plane.explain_endpoint("big").never
    door.backend.change_fleet(parse_fleet("node-a=NVIDIA_H200:1;node-b=NVIDIA_B200:1").devices)
    await door.settle()
    assert not door.plane.explain_endpoint("big").never
    assert door.worker("big").placement().node == "node-b"


async def test_a_node_leaving_loses_its_workers_and_their_jobs_follow_the_retry_rule() -> None:
    door = await open_door("node-a=NVIDIA_H200:1;node-b=NVIDIA_H200:1")
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200, workers=(0, 2))
    job = door.submit("e")
    await door.settle()
    worker = door.worker("e")
    assert worker.placement().node == "node-a"
    await door.pull(worker)
    door.backend.change_fleet(parse_fleet("node-b=NVIDIA_H200:1").devices)
    await door.settle()
    assert worker.id in door.backend.stopped and job.retries == 1
    (replacement,) = door.workers("e")
    assert replacement.placement().node == "node-b"
    assert [row["node"] for row in door.plane.fleet_view()] == ["node-b"]


# ---------------------------------------------------------------------------------------------------------------------
# invariants


class _FailingFlush(MemoryJobStore):
    def __init__(self) -> None:
        super().__init__()
        self.failing = True

    def flush(self) -> None:
        if self.failing:
            raise OSError("disk full")


async def test_nobody_hears_of_a_job_end_before_it_is_durable() -> None:
    store = _FailingFlush()
    plane = ControlPlane(store, StubBackend(), worker_secret="door", clock=FakeClock())
    from flashpoint import Endpoint
    from tests.scheduler.door import TARGET

    plane.register(Endpoint(name="cpu", cpu="cpu3c-1-2").spec, TARGET)
    heard: list[JobView] = []
    plane.listen(heard.append)
    job = plane.submit("cpu", {})
    plane.cancel(job.id)
    await plane.settled()
    for _ in range(3):
        await asyncio.sleep(0)
    assert heard == []  # its end is not durable yet
    store.failing = False
    plane.book.commits.soon()
    await plane.committed()
    assert [view.id for view in heard] == [job.id]


async def test_close_answers_every_long_poll_and_cancels_the_embedded_planes_jobs() -> None:
    door = await open_door()
    door.endpoint(name="e", gpu=GpuType.NVIDIA_H200)
    job = door.submit("e")
    await door.settle()
    worker = door.worker("e")
    await door.pull(worker)
    waiting = asyncio.ensure_future(door.plane.take("e", worker.id, 1, hold_s=60))
    stops = asyncio.ensure_future(door.plane.stop_signals("e", worker.id, hold_s=60))
    await asyncio.sleep(0)
    await door.plane.close()
    assert await asyncio.wait_for(waiting, 1) == []
    assert await asyncio.wait_for(stops, 1) == [job.id]
    assert (job.status, job.reason) == (JobStatus.CANCELLED, Reason.SHUTDOWN)
    assert door.backend.closed


# ---------------------------------------------------------------------------------------------------------------------
# defects that once hid in the engine


async def test_a_launch_that_cannot_be_built_leaves_no_phantom_worker_holding_devices() -> None:
    # Given an endpoint registered without its code file: its worker's command cannot be built
    door = await open_door("node-a=NVIDIA_H200:1")
    from flashpoint import Endpoint

    door.plane.register(Endpoint(name="e", gpu=GpuType.NVIDIA_H200).spec, WorkerTarget(pickled=b"code"))
    job = door.submit("e")
    await door.settle()
    # Then no worker is recorded and the device stays free; the failure counts as a failed start, with its message
    assert door.plane.workers == {} and door.backend.started == []
    assert [row["worker"] for row in door.plane.fleet_view()] == [None]
    for _ in range(MAX_START_ATTEMPTS):
        await door.step(30)
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.WORKER_START_FAILED)
    assert job.error is not None and "no code file" in job.error.message


class _SlowStart(StubBackend):
    """A start that waits on a future only it holds, as a real start waits on a process or an actor."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.waiting: list[weakref.ref[asyncio.Future[None]]] = []

    async def start(self, launch: Launch, on_line: LineCallback, on_exit: ExitCallback) -> Started:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(weakref.ref(future))
        await future
        return await super().start(launch, on_line, on_exit)


async def test_a_start_in_flight_is_kept_alive_by_the_plane() -> None:
    # Given a worker start waiting on something only it references
    backend = _SlowStart(parse_fleet("node-a=NVIDIA_H200:1").devices)
    plane = ControlPlane(MemoryJobStore(), backend, worker_secret="door", clock=FakeClock())
    from flashpoint import Endpoint
    from tests.scheduler.door import TARGET

    plane.register(Endpoint(name="e", gpu=GpuType.NVIDIA_H200).spec, TARGET)
    plane.submit("e", {})
    plane.reconcile()
    await asyncio.sleep(0)
    # When the garbage collector runs
    gc.collect()
    # Then the start is still in flight (an unreferenced task would have been collected with its future)
    (ref,) = backend.waiting
    future = ref()
    assert future is not None and not future.done()
    future.set_result(None)
    await plane.settled()
    assert backend.started and plane.workers[backend.started[0]].state is WorkerState.STARTING
