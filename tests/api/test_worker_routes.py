"""The Runpod worker protocol as the plane serves it, driven over real HTTP on loopback (runpod-protocol.md §3, §5)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.embedded import EmbeddedServer
from flashpoint.scheduler.loop import Worker

pytestmark = pytest.mark.timeout(60)


async def _setup(make_embedded: Any, hold_s: str = "0.3") -> tuple[EmbeddedServer, Any, dict[str, str]]:
    # A B200 endpoint on an H200 fleet: no real worker can ever start, so this test plays the worker itself.
    embedded = make_embedded("NVIDIA_H200:1", FLASHPOINT_TAKE_HOLD_S=hold_s)

    @Endpoint(name="proto", gpu=GpuType.NVIDIA_B200)
    async def proto(data: dict) -> dict:
        return data

    first = await proto.run({"n": 0})
    await first.cancel()

    async def add_worker() -> None:
        worker = Worker(id="w-test", endpoint="proto", devices=())
        embedded.plane.workers[worker.id] = worker
        embedded.plane.endpoints["proto"].workers[worker.id] = worker

    embedded.run_sync(add_worker())
    return embedded, proto, {"Authorization": embedded.plane.worker_credential("proto", "w-test")}


def _url(embedded: EmbeddedServer, route: str) -> str:
    return f"{embedded.url}/v2/proto/{route}"


async def test_worker_routes_need_the_worker_key(make_embedded) -> None:
    embedded, _, headers = await _setup(make_embedded)
    async with httpx.AsyncClient() as client:
        denied = await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        assert denied.status_code == 401
        assert denied.headers["content-type"] == "application/json"
        assert denied.json()["code"] == "unauthorized"
        wrong = await client.get(_url(embedded, "ping/w-test?gpu=x"), headers={"Authorization": "nope"})
        assert wrong.status_code == 401
        raw = await client.get(_url(embedded, "ping/w-test?gpu=x"), headers=headers)
        bearer = await client.get(
            _url(embedded, "ping/w-test?gpu=x"), headers={"Authorization": f"Bearer {headers['Authorization']}"}
        )
        assert (raw.status_code, bearer.status_code) == (200, 200)


async def test_take_long_polls_then_answers_204_and_hands_out_jobs(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    async with httpx.AsyncClient(headers=headers) as client:
        empty = await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        assert empty.status_code == 204
        job = await proto.run({"n": 1})
        taken = await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        assert taken.status_code == 200
        body = taken.json()
        assert body["id"] == job.id and body["input"] == {"data": {"n": 1}}
        assert await job.status() == "IN_PROGRESS"
        assert job.view.worker_id == "w-test"

        batch_jobs = [await proto.run({"n": i}) for i in (2, 3)]
        batch = await client.get(_url(embedded, "job-take-batch/w-test?gpu=x&batch_size=5&job_in_progress=1"))
        assert [item["id"] for item in batch.json()] == [j.id for j in batch_jobs]


async def test_job_done_parses_form_labelled_json_and_is_idempotent(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"n": 1})
    form = {**headers, "Content-Type": "application/x-www-form-urlencoded", "charset": "utf-8"}
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        progress = json.dumps({"status": "IN_PROGRESS", "output": {"pct": 50}}).encode()
        await client.post(
            _url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"), content=progress, headers=form
        )
        assert await job.status() == "IN_PROGRESS"  # a progress update is not a completion
        assert job.view.output == {"pct": 50}

        result = json.dumps({"output": {"text": "héllo ✓"}}, ensure_ascii=False).encode()
        for _ in range(2):  # the worker retries on 5xx: the same result may arrive twice
            done = await client.post(
                _url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"), content=result, headers=form
            )
            assert done.status_code == 200
        late = await client.post(_url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"), content=progress)
        assert late.status_code == 200
    assert await job.wait(timeout=5) == "COMPLETED"
    assert job.output == {"text": "héllo ✓"}  # a late progress post did not overwrite the result
    counters = embedded.run_sync(_counters(embedded))
    assert counters["completed"] == 1


async def _counters(embedded: EmbeddedServer) -> dict[str, int]:
    return dict(embedded.plane.endpoints["proto"].counters)


async def test_raised_error_record_becomes_failed_with_remote_traceback(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"n": 1})
    record = {
        "error_type": "<class 'KeyError'>",
        "error_message": "'prompt'",
        "error_traceback": "Traceback (most recent call last):\n  File \"handler.py\", line 3\nKeyError: 'prompt'\n",
        "hostname": "unknown",
        "worker_id": "w-test",
        "runpod_version": "1.12.0",
    }
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        await client.post(
            _url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"),
            content=json.dumps({"error": json.dumps(record)}),
        )
        bad = await client.post(_url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"), content=b"{not json")
        assert bad.status_code == 400 and bad.json()["code"] == "bad_json"
    assert await job.wait(timeout=5) == "FAILED"
    error = job.error
    assert error is not None
    assert (error.remote_type, error.remote_message, error.reason) == ("KeyError", "'prompt'", "user_error")
    assert error.remote_traceback is not None and "handler.py" in error.remote_traceback


async def test_returned_error_value_fails_the_job_with_that_text(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"n": 1})
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        await client.post(
            _url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"),
            content=json.dumps({"error": "out of cheese"}),
        )
    assert await job.wait(timeout=5) == "FAILED"
    assert job.error is not None and job.error.remote_message == "out of cheese"


async def test_cancel_reaches_the_worker_through_job_stop(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"n": 1})
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x&job_in_progress=0"))
        assert (await client.get(_url(embedded, "job-stop/w-test?gpu=x"))).status_code == 204
        assert await job.cancel() == "CANCELLED"
        stop = await client.get(_url(embedded, "job-stop/w-test?gpu=x"))
        assert stop.json() == {"jobsToStop": [job.id]}
        # the sync handler finished anyway and posts late: the terminal state is sticky
        late = await client.post(
            _url(embedded, f"job-done/w-test/{job.id}?gpu=x&isStream=false"), content=json.dumps({"output": 1})
        )
        assert late.status_code == 200
    assert await job.status() == "CANCELLED"


async def test_job_done_batch_posts_several_results_and_its_answer_carries_the_next_jobs(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    first = [await proto.run({"n": i}) for i in (1, 2)]
    async with httpx.AsyncClient(headers=headers) as client:
        taken = await client.get(_url(embedded, "job-take-batch/w-test?gpu=x&batch_size=2&job_in_progress=0"))
        assert [item["id"] for item in taken.json()] == [j.id for j in first]
        second = [await proto.run({"n": i}) for i in (3, 4, 5)]
        results = [{"id": j.id, "output": {"n": n}} for j, n in zip(first, (1, 2), strict=True)]
        answer = await client.post(_url(embedded, "job-done-batch/w-test?gpu=x&take=2"), content=json.dumps(results))
        assert answer.status_code == 200
        assert [item["id"] for item in answer.json()] == [j.id for j in second[:2]]  # take=2: two of the three
        for job, n in zip(first, (1, 2), strict=True):
            assert await job.wait(timeout=10) == "COMPLETED" and job.output == {"n": n}
        assert [await j.status() for j in second] == ["IN_PROGRESS", "IN_PROGRESS", "IN_QUEUE"]

        # posted again (an answer lost on the way): idempotent; take=0 posts results only
        again = await client.post(_url(embedded, "job-done-batch/w-test?gpu=x"), content=json.dumps(results))
        assert again.status_code == 204
        assert [j.output for j in first] == [{"n": 1}, {"n": 2}]

        # with nothing queued for it, a take holds (FLASHPOINT_TAKE_HOLD_S) and then answers 204
        rest = [{"id": j.id, "output": "late"} for j in second[:2]]
        held = await client.post(_url(embedded, "job-done-batch/w-test?gpu=x&take=5"), content=json.dumps(rest))
        assert held.status_code == 200 and [item["id"] for item in held.json()] == [second[2].id]
        assert [await j.wait(timeout=10) for j in second[:2]] == ["COMPLETED", "COMPLETED"]


@pytest.mark.parametrize(
    ("body", "query", "code"),
    [
        ("{not json", "", "bad_json"),
        (json.dumps({"id": "x", "output": 1}), "", "bad_request"),  # an object, not a list
        (json.dumps([{"output": 1}]), "", "bad_request"),  # a result without its job id
        ("[]", "&take=many", "bad_json"),
    ],
)
async def test_job_done_batch_refuses_a_malformed_post(make_embedded, body: str, query: str, code: str) -> None:
    embedded, _, headers = await _setup(make_embedded)
    async with httpx.AsyncClient(headers=headers) as client:
        answer = await client.post(_url(embedded, f"job-done-batch/w-test?gpu=x{query}"), content=body)
    assert answer.status_code == 400
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["code"] == code


async def test_a_retiring_worker_waits_for_nothing_instead_of_spinning_and_its_stop_answers_it(make_embedded) -> None:
    import asyncio

    embedded, proto, headers = await _setup(make_embedded, hold_s="30")
    worker = embedded.plane.workers["w-test"]

    async def retire() -> None:
        worker.retiring = True

    embedded.run_sync(retire())
    job = await proto.run({"n": 1})
    async with httpx.AsyncClient(headers=headers, timeout=60) as client:
        take = asyncio.ensure_future(client.get(_url(embedded, "job-take-batch/w-test?gpu=x&batch_size=2")))

        async def waiting() -> bool:
            return any(entry[0] == "w-test" for entry in embedded.plane.endpoints["proto"].takers)

        for _ in range(500):  # bounded: until the plane holds the take
            if embedded.run_sync(waiting(), timeout=10):
                break
            await asyncio.sleep(0.01)
        assert embedded.run_sync(waiting(), timeout=10)
        assert not take.done() and await job.status() == "IN_QUEUE"  # held, and given nothing

        async def stop() -> None:
            embedded.plane._mark_stopping(worker)

        embedded.run_sync(stop())
        answer = await asyncio.wait_for(take, 10)  # well before the 30 s hold
        assert answer.status_code == 204
        assert await job.status() == "IN_QUEUE"
        await job.cancel()
