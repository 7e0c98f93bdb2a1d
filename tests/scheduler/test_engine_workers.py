"""Worker rules through the test door (StubBackend + FakeClock): an idle worker kept for a queued job, how an exit
before the first pull counts (a failed start, or a worker killed from outside), and the queue's caps."""

from __future__ import annotations

import signal

import pytest

from flashpoint import GpuGroup, GpuType, QueueFullError
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.records import WorkerState
from flashpoint.scheduler.supervision import MAX_START_ATTEMPTS
from tests.scheduler.door import Door, open_door


async def next_start(door: Door, limit: float = 60.0) -> float:
    """Turn the clock a quarter second at a time until the plane starts another worker; the seconds that took."""
    started, waited = len(door.backend.started), 0.0
    while len(door.backend.started) == started:
        assert waited < limit, f"no worker started within {limit}s"
        await door.step(0.25)
        waited += 0.25
    return waited


async def test_an_idle_worker_kept_for_a_queued_job_stops_at_once_when_the_queue_empties() -> None:
    # Given an endpoint with idle_timeout=0 whose only worker is ready (it pinged before its first pull) and idle,
    # while a job is queued
    door = await open_door()
    door.endpoint(name="lazy", gpu=GpuType.NVIDIA_H200, idle_timeout=0)
    job = door.submit("lazy")
    await door.settle()
    worker = door.worker("lazy")
    door.plane.ping("lazy", worker.id, [])
    # When the clock turns, then the worker stays: it is about to take the queued job
    await door.step(1)
    assert worker.state is WorkerState.IDLE and door.backend.stopped == []
    # And once nothing is queued, the next turn stops it at once
    door.plane.cancel(job.id)
    await door.step(0)
    assert door.backend.stopped == [worker.id]


async def test_a_kill_loop_before_the_first_pull_backs_off_doubling_to_5s_and_never_fails_the_queue() -> None:
    # Given a queued job and starting workers that an OOM killer (SIGKILL), an operator (SIGTERM) or a hang-up
    # (SIGHUP) ends before their first pull, more times in a row than the failed-start limit
    door = await open_door()
    door.endpoint(name="heavy", gpu=GpuType.NVIDIA_H200)
    job = door.submit("heavy")
    await door.settle()
    kills = [signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGKILL, signal.SIGKILL, signal.SIGKILL]
    kills.append(signal.SIGHUP)
    assert len(kills) > MAX_START_ATTEMPTS
    delays = []
    for kill in kills:
        await door.crash(door.worker("heavy"), -kill)
        # Then none counts as a failed start: the job still waits for the next worker
        assert door.plane.endpoint("heavy").start_failures == 0
        assert job.status is JobStatus.IN_QUEUE
        # And the next start waits a little (a kill loop does not spin), capped well below a failed start's back-off
        delays.append(await next_start(door))
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert door.plane.endpoint("heavy").start_losses == len(kills)


async def test_a_worker_that_fails_by_itself_before_its_first_pull_is_a_failed_start() -> None:
    door = await open_door()
    door.endpoint(name="broken", gpu=GpuType.NVIDIA_H200)
    job = door.submit("broken")
    await door.settle()
    # exit codes and self-inflicted faults (a segfault, an abort) count; after five in a row the queue fails
    codes = [1, -signal.SIGSEGV, -signal.SIGABRT, 2, 1]
    assert len(codes) == MAX_START_ATTEMPTS
    failures = []
    for n, code in enumerate(codes):
        if n:
            await next_start(door)
        await door.crash(door.worker("broken"), code)
        failures.append(door.plane.endpoint("broken").start_failures)
    assert failures == [1, 2, 3, 4, 5]
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.WORKER_START_FAILED)
    assert job.error is not None and "exit code 1" in job.error.message  # no stderr: the last exit says why


async def test_the_queue_is_capped_by_jobs_and_says_what_to_do() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", max_queued_jobs=2)
    door.endpoint(name="capped", gpu=GpuType.NVIDIA_B200)  # never runs here: its jobs stay queued
    first = door.submit("capped")
    door.submit("capped")
    with pytest.raises(QueueFullError, match="at its limit of 2 jobs.*retry later.*--max-queued-jobs"):
        door.submit("capped")
    door.plane.cancel(first.id)  # a job leaving the queue makes room
    door.submit("capped")
    assert door.plane.book.queued_jobs == 2


async def test_the_queue_is_capped_by_the_bytes_of_its_inputs() -> None:
    door = await open_door("node-a=NVIDIA_H200:1", max_queued_jobs=100, max_queued_bytes=1000)
    door.endpoint(name="capped", gpu=GpuType.NVIDIA_B200)
    door.submit("capped")  # an input of unknown size (not from HTTP) counts no bytes
    with pytest.raises(QueueFullError, match="bytes of input.*--max-queued-mb"):
        door.submit("capped", size=1001)
    big = door.submit("capped", size=900)
    with pytest.raises(QueueFullError, match="bytes of input"):
        door.submit("capped", size=101)
    door.plane.cancel(big.id)  # its bytes leave the queue with it
    door.submit("capped", size=1000)
    assert (door.plane.book.queued_jobs, door.plane.book.queued_bytes) == (2, 1000)


async def test_workers_never_inherit_the_servers_own_keys() -> None:
    # Given a plane whose own environment holds the server's API key and a server URL (flashpoint serve's)
    door = await open_door(worker_env={"FLASHPOINT_API_KEY": "admin-key", "FLASHPOINT_URL": "http://x", "KEEP": "1"})
    door.endpoint(name="plain", gpu=GpuGroup.ANY)
    door.endpoint(name="chosen", gpu=GpuGroup.ANY, env={"FLASHPOINT_API_KEY": "its-own"})
    door.submit("plain")
    door.submit("chosen")
    await door.settle()

    # Then workers get neither (they call the plane with their own caller key), unless the endpoint's env sets one
    plain = door.backend.launch(door.worker("plain").id).env
    assert "FLASHPOINT_API_KEY" not in plain and "FLASHPOINT_URL" not in plain
    assert plain["KEEP"] == "1" and plain["FLASHPOINT_CALLER_KEY"] != "admin-key"
    assert door.backend.launch(door.worker("chosen").id).env["FLASHPOINT_API_KEY"] == "its-own"
