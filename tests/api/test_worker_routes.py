"""The Runpod worker protocol as the plane serves it (runpod-protocol.md §3, §5): a door plane (StubBackend, FakeClock)
starts the worker itself, and the test speaks as that worker over the real worker routes, in-process.

Covers ``flashpoint.api.workers`` (the worker routes) for tests/test_layout.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from flashpoint import GpuType
from flashpoint.jobs import JobStatus, Reason
from flashpoint.scheduler.records import Worker, WorkerState
from tests.scheduler.door import Door, open_door

pytestmark = pytest.mark.timeout(30)


async def proto_worker(*, take_hold_s: float = 0.05, **plane_options: Any) -> tuple[Door, Worker]:
    """A plane on one H200 with endpoint "proto" kept warm (workers=(1, 1)): the worker it starts, not yet ready.
    ``take_hold_s`` is how long an empty job-take or job-stop holds (real time: long-polls wait on the loop)."""
    door = await open_door("node-a=NVIDIA_H200:1", take_hold_s=take_hold_s, **plane_options)
    door.endpoint(name="proto", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    return door, door.worker("proto")


def route(worker: Worker, name: str, query: str = "") -> str:
    """A worker route of ``worker`` as Runpod's worker calls it: ``?gpu=`` always, more query after it."""
    return f"/v2/{worker.endpoint}/{name}/{worker.id}?gpu=x{query}"


def done_route(worker: Worker, job_id: str) -> str:
    return f"/v2/{worker.endpoint}/job-done/{worker.id}/{job_id}?gpu=x&isStream=false"


async def test_worker_routes_need_the_worker_key() -> None:
    door, worker = await proto_worker()
    async with door.worker_client(worker) as client:
        key = client.headers.pop("Authorization")
        denied = await client.get(route(worker, "job-take"))
        assert denied.status_code == 401
        assert denied.headers["content-type"] == "application/json"
        assert denied.json()["code"] == "unauthorized"
        wrong = await client.get(route(worker, "ping"), headers={"Authorization": "nope"})
        assert wrong.status_code == 401
        raw = await client.get(route(worker, "ping"), headers={"Authorization": key})
        bearer = await client.get(route(worker, "ping"), headers={"Authorization": f"Bearer {key}"})
        assert (raw.status_code, bearer.status_code) == (200, 200)


async def test_an_empty_take_holds_for_its_hold_then_answers_204() -> None:
    door, worker = await proto_worker(take_hold_s=0.05)
    async with door.worker_client(worker) as client:
        empty = await client.get(route(worker, "job-take", "&job_in_progress=0"))
        batch = await client.get(route(worker, "job-take-batch", "&batch_size=5&job_in_progress=0"))
    assert (empty.status_code, batch.status_code) == (204, 204)
    assert worker.state is WorkerState.IDLE  # its first request made it ready


async def test_a_held_take_gets_the_job_submitted_while_it_waits_and_a_batch_takes_several() -> None:
    door, worker = await proto_worker(take_hold_s=30)
    async with door.worker_client(worker) as client:
        held = asyncio.ensure_future(client.get(route(worker, "job-take", "&job_in_progress=0")))
        await door.holding(worker)
        job = door.submit("proto", {"n": 1})
        taken = await asyncio.wait_for(held, 5)  # answered by the submit, long before the 30 s hold
        assert taken.status_code == 200
        body = taken.json()
        assert body["id"] == job.id and body["input"] == {"n": 1}
        assert job.status is JobStatus.IN_PROGRESS and job.worker_id == worker.id

        batch_jobs = [door.submit("proto", {"n": n}) for n in (2, 3)]
        batch = await client.get(route(worker, "job-take-batch", "&batch_size=5&job_in_progress=1"))
        assert [item["id"] for item in batch.json()] == [j.id for j in batch_jobs]


async def test_job_done_parses_form_labelled_json_and_is_idempotent() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"n": 1})
    form = {"Content-Type": "application/x-www-form-urlencoded", "charset": "utf-8"}
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take", "&job_in_progress=0"))
        progress = json.dumps({"status": "IN_PROGRESS", "output": {"pct": 50}}).encode()
        await client.post(done_route(worker, job.id), content=progress, headers=form)
        assert job.status is JobStatus.IN_PROGRESS  # a progress update is not a completion
        assert job.output == {"pct": 50}

        result = json.dumps({"output": {"text": "héllo ✓"}}, ensure_ascii=False).encode()
        for _ in range(2):  # the worker retries on 5xx: the same result may arrive twice
            done = await client.post(done_route(worker, job.id), content=result, headers=form)
            assert done.status_code == 200
        late = await client.post(done_route(worker, job.id), content=progress)
        assert late.status_code == 200
    assert job.status is JobStatus.COMPLETED
    assert job.output == {"text": "héllo ✓"}  # a late progress post did not overwrite the result
    assert door.plane.endpoint("proto").counters["completed"] == 1  # counted once


async def test_raised_error_record_becomes_failed_with_remote_traceback() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"n": 1})
    record = {
        "error_type": "<class 'KeyError'>",
        "error_message": "'prompt'",
        "error_traceback": "Traceback (most recent call last):\n  File \"handler.py\", line 3\nKeyError: 'prompt'\n",
        "hostname": "unknown",
        "worker_id": worker.id,
        "runpod_version": "1.12.0",
    }
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take", "&job_in_progress=0"))
        await client.post(done_route(worker, job.id), content=json.dumps({"error": json.dumps(record)}))
        bad = await client.post(done_route(worker, job.id), content=b"{not json")
        assert bad.status_code == 400 and bad.json()["code"] == "bad_json"
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.USER_ERROR)
    error = job.error
    assert error is not None
    assert (error.type, error.message) == ("KeyError", "'prompt'")
    assert "handler.py" in error.traceback


async def test_returned_error_value_fails_the_job_with_that_text() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take", "&job_in_progress=0"))
        await client.post(done_route(worker, job.id), content=json.dumps({"error": "out of cheese"}))
    assert job.status is JobStatus.FAILED
    assert job.error is not None and job.error.message == "out of cheese"


async def test_cancel_reaches_the_worker_through_job_stop() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take", "&job_in_progress=0"))
        assert (await client.get(route(worker, "job-stop"))).status_code == 204  # nothing to stop yet
        assert door.plane.cancel(job.id).status is JobStatus.CANCELLED
        stop = await client.get(route(worker, "job-stop"))
        assert stop.json() == {"jobsToStop": [job.id]}
        # the sync handler finished anyway and posts late: the terminal state is sticky
        late = await client.post(done_route(worker, job.id), content=json.dumps({"output": 1}))
        assert late.status_code == 200
    assert job.status is JobStatus.CANCELLED and job.output is None


async def test_a_held_job_stop_is_answered_by_the_cancel() -> None:
    door, worker = await proto_worker(take_hold_s=30)
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take", "&job_in_progress=0"))
        stop = asyncio.ensure_future(client.get(route(worker, "job-stop")))
        for _ in range(1000):  # bounded: until the plane holds the long-poll
            if worker.stop_waiter is not None:
                break
            await asyncio.sleep(0)
        assert worker.stop_waiter is not None and not stop.done()
        door.plane.cancel(job.id)
        answer = await asyncio.wait_for(stop, 5)  # at once, not after the 30 s hold
    assert answer.json() == {"jobsToStop": [job.id]}


async def test_job_done_batch_posts_several_results_and_its_answer_carries_the_next_jobs() -> None:
    door, worker = await proto_worker()
    first = [door.submit("proto", {"n": n}) for n in (1, 2)]
    async with door.worker_client(worker) as client:
        taken = await client.get(route(worker, "job-take-batch", "&batch_size=2&job_in_progress=0"))
        assert [item["id"] for item in taken.json()] == [j.id for j in first]
        second = [door.submit("proto", {"n": n}) for n in (3, 4, 5)]
        results = [{"id": j.id, "output": {"n": n}} for j, n in zip(first, (1, 2), strict=True)]
        answer = await client.post(route(worker, "job-done-batch", "&take=2"), content=json.dumps(results))
        assert answer.status_code == 200
        assert [item["id"] for item in answer.json()] == [j.id for j in second[:2]]  # take=2: two of the three
        assert [j.status for j in first] == [JobStatus.COMPLETED, JobStatus.COMPLETED]
        assert [j.output for j in first] == [{"n": 1}, {"n": 2}]
        assert [j.status for j in second] == [JobStatus.IN_PROGRESS, JobStatus.IN_PROGRESS, JobStatus.IN_QUEUE]

        # posted again (an answer lost on the way): idempotent; without take it posts results only
        again = await client.post(route(worker, "job-done-batch"), content=json.dumps(results))
        assert again.status_code == 204
        assert [j.output for j in first] == [{"n": 1}, {"n": 2}]
        assert door.plane.endpoint("proto").counters["completed"] == 2

        # the next post's answer carries what is still queued (one job, though it asked for five)
        rest = [{"id": j.id, "output": "late"} for j in second[:2]]
        more = await client.post(route(worker, "job-done-batch", "&take=5"), content=json.dumps(rest))
        assert more.status_code == 200 and [item["id"] for item in more.json()] == [second[2].id]
        assert [j.status for j in second[:2]] == [JobStatus.COMPLETED, JobStatus.COMPLETED]

        # with nothing queued, its take holds (take_hold_s) and then answers 204
        last = [{"id": second[2].id, "output": "last"}]
        empty = await client.post(route(worker, "job-done-batch", "&take=5"), content=json.dumps(last))
        assert empty.status_code == 204 and second[2].status is JobStatus.COMPLETED


@pytest.mark.parametrize(
    ("body", "query", "code"),
    [
        ("{not json", "", "bad_json"),
        (json.dumps({"id": "x", "output": 1}), "", "bad_request"),  # an object, not a list
        (json.dumps([{"output": 1}]), "", "bad_request"),  # a result without its job id
        ("[]", "&take=many", "bad_json"),
    ],
)
async def test_job_done_batch_refuses_a_malformed_post(body: str, query: str, code: str) -> None:
    door, worker = await proto_worker()
    async with door.worker_client(worker) as client:
        answer = await client.post(route(worker, "job-done-batch", query), content=body)
    assert answer.status_code == 400
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["code"] == code


async def test_a_retiring_worker_waits_for_nothing_instead_of_spinning_and_its_stop_answers_it() -> None:
    # Given a worker that holds two jobs and asked to be stopped (stopPod) with the first result: it retires
    door, worker = await proto_worker(take_hold_s=30)
    kept, last = door.submit("proto", {"n": 1}), door.submit("proto", {"n": 2})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take-batch", "&batch_size=2"))
        stop_pod = json.dumps({"output": 1, "stopPod": True})
        await client.post(done_route(worker, kept.id), content=stop_pod)
        assert worker.retiring and worker.state is not WorkerState.STOPPING
        # When it asks for more while a job is queued
        queued = door.submit("proto", {"n": 3})
        take = asyncio.ensure_future(client.get(route(worker, "job-take-batch", "&batch_size=2")))
        await door.holding(worker)
        # Then the take is held, and given nothing
        assert not take.done() and queued.status is JobStatus.IN_QUEUE
        # And once its last job is done, its stop answers the take at once, well before the 30 s hold
        await client.post(done_route(worker, last.id), content=json.dumps({"output": 2}))
        answer = await asyncio.wait_for(take, 5)
    await door.settle()
    assert answer.status_code == 204
    assert worker.id in door.backend.stopped
    assert queued.status is JobStatus.IN_QUEUE
