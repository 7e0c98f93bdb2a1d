"""A plane drains before it stops (``scheduler/draining.py``), through the test door (StubBackend + FakeClock): new
jobs are refused with the stopping message, workers take nothing new and stop once their running jobs end, nothing
starts for what stays queued, a rollout in flight is abandoned, and ``busy`` counts what a server waits for."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from flashpoint import GpuType
from flashpoint.errors import BackendError, RolloutFailed
from flashpoint.jobs import JobStatus
from flashpoint.scheduler.draining import STOPPING
from flashpoint.spec import WorkerTarget
from tests.scheduler.door import open_door

H200 = GpuType.NVIDIA_H200


async def test_a_draining_plane_finishes_running_work_and_takes_none() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    door.endpoint(name="embed", gpu=H200, workers=(0, 2))
    running = door.submit("embed")
    await door.step()
    (worker,) = door.workers("embed")
    assert await door.pull(worker) == [running.id]
    queued = door.submit("embed")
    assert door.plane.busy() == 1

    door.plane.drain()
    assert door.plane.draining
    with pytest.raises(BackendError, match="the server is stopping") as refused:
        door.submit("embed")
    assert str(refused.value) == STOPPING
    assert worker.retiring and await door.pull(worker) == []  # nothing new for it
    await door.step(5.0)
    assert [w.id for w in door.workers("embed")] == [worker.id]  # the queued job starts no worker

    await door.finish(worker, running.id)
    await door.step()
    assert running.status is JobStatus.COMPLETED
    assert door.plane.busy() == 0
    assert worker.id in door.backend.stopped  # its last job done, it stops
    assert queued.status is JobStatus.IN_QUEUE  # kept for the next start


async def test_a_rollout_in_flight_is_abandoned_when_the_plane_drains() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    spec = door.endpoint(name="embed", gpu=H200, workers=(1, 1))
    await door.step()
    new = WorkerTarget(import_path="tests.apps.handlers_app:other")
    rollout = asyncio.ensure_future(door.plane.roll_out(dataclasses.replace(spec), new, timeout_s=60))
    await asyncio.sleep(0)
    await door.settle()
    door.plane.drain()
    with pytest.raises(RolloutFailed, match="the server is stopping"):
        await rollout
