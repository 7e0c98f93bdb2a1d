"""The control loop's clock: idle scale-down, driven tick by tick on a real plane (no sleeping)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.scheduler.loop import Worker, WorkerState


async def test_idle_worker_is_kept_while_its_endpoint_has_queued_jobs(make_embedded: Any) -> None:
    # Given an endpoint with idle_timeout=0 whose only worker is idle (it pinged before its first pull) while a job
    # is queued; a B200 request on an H200 fleet, so the plane itself starts no worker
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="lazy", gpu=GpuType.NVIDIA_B200, idle_timeout=0)
    async def lazy(data: dict) -> dict:
        return data

    job = await lazy.run({})

    async def add_idle_worker() -> Worker:
        worker = Worker(id="w-idle", endpoint="lazy", devices=(), state=WorkerState.IDLE, idle_since=0.0)
        embedded.plane.workers[worker.id] = worker
        embedded.plane.endpoints["lazy"].workers[worker.id] = worker
        return worker

    async def tick() -> None:
        embedded.plane._tick(time.monotonic())

    worker = embedded.run_sync(add_idle_worker())
    # When the clock ticks, then the worker stays: it is about to take the queued job
    embedded.run_sync(tick())
    assert worker.state is WorkerState.IDLE
    # And once nothing is queued, the next tick stops it at once
    await job.cancel()
    embedded.run_sync(tick())
    assert worker.state is WorkerState.STOPPING


async def _starting_worker(embedded: Any, endpoint: str, n: int) -> Worker:
    worker = Worker(id=f"w-start-{n}", endpoint=endpoint, devices=())
    embedded.plane.workers[worker.id] = worker
    embedded.plane.endpoints[endpoint].workers[worker.id] = worker
    return worker


async def test_starting_workers_killed_from_outside_never_fail_the_queue(make_embedded: Any) -> None:
    # Given a queued job and starting workers that an OOM killer (SIGKILL) or an operator (SIGTERM) ends before their
    # first pull, more times in a row than the failed-start limit
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="heavy", gpu=GpuType.NVIDIA_B200)
    async def heavy(data: dict) -> dict:
        return data

    job = await heavy.run({})

    async def kill_starting(n: int, code: int) -> tuple[int, int]:
        worker = await _starting_worker(embedded, "heavy", n)
        embedded.plane._on_exit(worker.id, code)
        ep = embedded.plane.endpoints["heavy"]
        return ep.start_failures, ep.start_losses

    counts = [embedded.run_sync(kill_starting(n, code)) for n, code in enumerate([-9, -15, -9, -9, -9, -9, -1])]
    # Then none counts as a failed start: the job still waits for the next worker
    assert counts[-1] == (0, 7)
    assert await job.status() == "IN_QUEUE"
    # And the next start waits a little (a kill loop does not spin), capped well below a failed start's back-off
    next_start_in = embedded.plane.endpoints["heavy"].next_start_at - time.monotonic()
    assert 0 < next_start_in <= 5.0


async def test_a_worker_that_fails_by_itself_before_its_first_pull_is_a_failed_start(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="broken", gpu=GpuType.NVIDIA_B200)
    async def broken(data: dict) -> dict:
        return data

    job = await broken.run({})

    async def fail_starting(n: int, code: int) -> int:
        worker = await _starting_worker(embedded, "broken", n)
        embedded.plane._on_exit(worker.id, code)
        return embedded.plane.endpoints["broken"].start_failures

    # exit codes and self-inflicted faults (a segfault, an abort) count; after five in a row the queue fails
    assert [embedded.run_sync(fail_starting(n, code)) for n, code in enumerate([1, -11, -6, 2, 1])] == [1, 2, 3, 4, 5]
    assert await job.wait(timeout=5) == "FAILED"
    assert job.view.reason is not None and job.view.reason.value == "worker_start_failed"


async def test_the_queue_is_capped_by_jobs_and_bytes_and_says_what_to_do(make_embedded: Any) -> None:
    from flashpoint import QueueFullError

    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="capped", gpu=GpuType.NVIDIA_B200)
    async def capped(data: dict) -> dict:
        return data

    embedded.plane.max_queued_jobs = 2
    first = await capped.run({})
    await capped.run({})
    with pytest.raises(QueueFullError, match="at its limit of 2 jobs.*retry later.*--max-queued-jobs"):
        await capped.run({})
    await first.cancel()  # a job leaving the queue makes room
    await capped.run({})

    async def submit(size: int) -> Any:
        return embedded.plane.submit("capped", {}, size=size)

    embedded.plane.max_queued_jobs, embedded.plane.max_queued_bytes = 100, 1000
    with pytest.raises(QueueFullError, match="bytes of input"):
        embedded.run_sync(submit(1001))
    embedded.run_sync(submit(900))
    assert embedded.plane.queued_jobs == 3 and embedded.plane.queued_bytes == 900
