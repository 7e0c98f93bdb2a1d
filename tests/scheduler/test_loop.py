"""The control loop's clock: idle scale-down, driven tick by tick on a real plane (no sleeping)."""

from __future__ import annotations

import time
from typing import Any

from flashpoint import Endpoint, GpuType
from flashpoint.scheduler.loop import Worker, WorkerState


async def test_idle_worker_is_kept_while_its_endpoint_has_queued_jobs(make_plane: Any) -> None:
    # Given an endpoint with idle_timeout=0 whose only worker is idle (it pinged before its first pull) while a job
    # is queued; a B200 request on an H200 fleet, so the plane itself starts no worker
    plane = make_plane("NVIDIA_H200:1")

    @Endpoint(name="lazy", gpu=GpuType.NVIDIA_B200, idle_timeout=0)
    async def lazy(data: dict) -> dict:
        return data

    job = await lazy.run({})

    async def add_idle_worker() -> Worker:
        worker = Worker(id="w-idle", endpoint="lazy", devices=(), state=WorkerState.IDLE, idle_since=0.0)
        plane.plane.workers[worker.id] = worker
        plane.plane.endpoints["lazy"].workers[worker.id] = worker
        return worker

    async def tick() -> None:
        plane.plane._tick(time.monotonic())

    worker = plane.run_sync(add_idle_worker())
    # When the clock ticks, then the worker stays: it is about to take the queued job
    plane.run_sync(tick())
    assert worker.state is WorkerState.IDLE
    # And once nothing is queued, the next tick stops it at once
    await job.cancel()
    plane.run_sync(tick())
    assert worker.state is WorkerState.STOPPING
