"""Cold starts measured by phase, through the test door (decision 0118): the plane's phases (waiting for devices,
process) to the second on the fake clock, the worker's own (imports, init) as its first job-take reports them over
the real worker routes, and the breakdown on the job that waited on the start (kept in its store)."""

from __future__ import annotations

import pytest

from flashpoint.jobs import Job
from flashpoint.scheduler.records import Worker
from flashpoint.wire import coldstart
from tests.scheduler.door import Door, open_door


async def blocked_start(door: Door) -> tuple[Job, Worker]:
    """A job of ``ep`` waits 3 s for the one GPU ``hog``'s running job holds; then ``ep``'s worker starts."""
    door.endpoint(name="hog", gpu="NVIDIA H200", workers=(0, 1), idle_timeout=600)
    door.endpoint(name="ep", gpu="NVIDIA H200", workers=(0, 1))
    door.submit("hog")
    await door.step()
    hog = door.worker("hog")
    (hog_job,) = await door.pull(hog)
    job = door.submit("ep")
    await door.step(3)
    assert door.workers("ep") == []  # no device yet
    await door.finish(hog, hog_job)
    await door.step()  # the hog's idle worker yields its GPU to the waiting endpoint
    await door.step()
    worker = door.worker("ep")
    assert worker.phases == {}  # starting: nothing measured yet
    return job, worker


async def take(door: Door, worker: Worker, header: str | None) -> str:
    headers = {coldstart.HEADER: header} if header is not None else {}
    async with door.worker_client(worker) as client:
        answer = await client.get(f"/v2/ep/job-take/{worker.id}", headers=headers)
    assert answer.status_code == 200
    job_id: str = answer.json()["id"]
    return job_id


@pytest.mark.parametrize(
    ("header", "worker_phases"),
    [
        # flashpoint's worker: its imports and init, the rest of the 10 s start is process
        ("imports=2,init=5", {"process": 3.0, "imports": 2.0, "init": 5.0}),
        # a runpod worker sends nothing: the whole start is process, imports and init unknown
        (None, {"process": 10.0}),
        # a hostile worker: unknown names, negative and not-finite numbers are ignored, never kept
        ("imports=-1,init=nan,evil=7,devices=9", {"process": 10.0}),
        ("imports=1," + "9" * 5000, {"process": 10.0}),  # too long: ignored whole
    ],
)
async def test_a_start_s_phases_are_on_its_worker_and_on_the_job_that_waited(
    header: str | None, worker_phases: dict[str, float]
) -> None:
    # Given a job that waited for a GPU, and the worker then started for it
    door = await open_door("node-a=NVIDIA_H200:1")
    job, worker = await blocked_start(door)
    started_wall = door.clock.time()
    devices = started_wall - job.created_at

    # When the worker is ready 10 s later and takes the job, reporting its phases (or not)
    door.clock.advance(10)
    assert await take(door, worker, header) == job.id

    # Then the worker's record has the phases (on the fake clock: exact), and its row in /v1/endpoints shows them
    assert worker.phases == {**worker_phases, "first_job": 0.0}
    assert worker.to_json()["phases"] == worker.phases
    # and the job carries the start it waited on, with its wait for devices, summing to its queue-to-start time
    assert devices >= 3.0
    assert job.cold_start == {"devices": devices, **worker_phases, "first_job": 0.0}
    assert job.started_at is not None
    assert sum(job.cold_start.values()) == pytest.approx(job.started_at - job.created_at)
    # kept in the store, and in the job's view
    stored = door.plane.store.get(job.id)
    assert stored is not None and stored.cold_start == job.cold_start
    assert job.view().to_native()["coldStart"] == job.cold_start


async def test_a_job_that_came_after_its_worker_was_ready_waited_on_no_cold_start() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    first, worker = await blocked_start(door)
    door.clock.advance(2)
    assert await take(door, worker, "imports=1") == first.id
    await door.finish(worker, first.id)

    later = door.submit("ep")
    await door.settle()
    assert await door.pull(worker) == [later.id]

    assert later.cold_start is None
    assert first.cold_start is not None  # the start's phases stay with the job that waited on it


async def test_phases_a_worker_reports_after_its_ping_made_it_ready_still_count() -> None:
    # Given a worker whose ping (at 10 s) makes it ready before its first take
    door = await open_door("node-a=NVIDIA_H200:1")
    job, worker = await blocked_start(door)
    door.clock.advance(10)
    door.plane.ping("ep", worker.id)
    assert worker.phases == {"process": 10.0}

    # When its take, a second later, reports its imports and init
    door.clock.advance(1)
    assert await take(door, worker, "imports=2,init=5") == job.id

    # Then they come out of the start's process, and the first job waited the second between
    assert worker.phases == {"process": 3.0, "imports": 2.0, "init": 5.0, "first_job": 1.0}
    assert job.cold_start is not None and job.started_at is not None
    assert sum(job.cold_start.values()) == pytest.approx(job.started_at - job.created_at)


async def test_a_route_worker_s_whole_start_to_its_first_200_is_process() -> None:
    # Given a route endpoint whose worker started at zero, held by a request
    door = await open_door("node-a=NVIDIA_H200:1")
    door.routes_endpoint(name="api", gpu="NVIDIA H200", workers=(1, 1))
    await door.step()
    worker = door.worker("api")
    assert worker.phases == {}

    # When its /ping answers 200 four seconds later
    door.clock.advance(4)
    await door.ready(worker)

    # Then its start is on its record: it reports no imports or init, so all of it is process
    assert worker.phases == {"process": 4.0}


async def done_batch(door: Door, worker: Worker, job_id: str, header: str | None) -> None:
    headers = {coldstart.HEADER: header} if header is not None else {}
    async with door.worker_client(worker) as client:
        answer = await client.post(
            f"/v2/ep/job-done-batch/{worker.id}", json=[{"id": job_id, "output": 1}], headers=headers
        )
    assert answer.status_code < 300
    await door.settle()


async def test_a_class_s_constructor_reported_with_the_first_result_is_init_on_the_worker_and_that_job() -> None:
    # Given a class endpoint's worker that started with its imports measured and took the job that waited on it
    door = await open_door("node-a=NVIDIA_H200:1")
    job, worker = await blocked_start(door)
    door.clock.advance(10)
    assert await take(door, worker, "imports=2") == job.id
    waited = dict(job.cold_start or {})
    assert "init" not in waited

    # When its first result comes with the constructor's time (the model load ran inside that job)
    await done_batch(door, worker, job.id, "init=35")

    # Then init is on the worker's start and on the job, kept in the store, and the job's phases sum to its wait
    # plus the constructor
    assert worker.phases == {"process": 8.0, "imports": 2.0, "init": 35.0, "first_job": 0.0}
    assert job.cold_start == coldstart.ordered({**waited, "init": 35.0})
    stored = door.plane.store.get(job.id)
    assert stored is not None and stored.cold_start == job.cold_start
    assert job.started_at is not None
    assert sum(job.cold_start.values()) == pytest.approx(job.started_at - job.created_at + 35.0)

    # and a second report, with a later job's result, changes nothing
    later = door.submit("ep")
    await door.settle()
    assert await door.pull(worker) == [later.id]
    await done_batch(door, worker, later.id, "init=99")
    assert worker.phases["init"] == 35.0 and later.cold_start is None
