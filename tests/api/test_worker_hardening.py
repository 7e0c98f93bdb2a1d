"""The worker routes against hostile or broken workers (issue 9): each worker's own key, binary outputs marked out of
band only where the job allowed them, text that UTF-8 cannot carry, bodies over the limit, and the watchdog for a
worker that keeps pinging but lost track of a job. A door plane (StubBackend, FakeClock) starts the workers and the
test speaks as them over the real worker routes, in-process; one test runs a real worker process on a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.api.native import create_native_app
from flashpoint.jobs import JobStatus, Reason
from flashpoint.wire import codec
from tests.api.test_worker_routes import done_route, proto_worker, route
from tests.scheduler.door import BASE_URL, open_door

pytestmark = pytest.mark.timeout(60)


async def test_each_worker_has_its_own_key_bound_to_its_id_and_endpoint() -> None:
    door = await open_door("node-a=NVIDIA_H200:2", take_hold_s=0.05)
    door.endpoint(name="proto", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    door.endpoint(name="victim", gpu=GpuType.NVIDIA_H200, workers=(1, 1))
    await door.settle()
    mine, theirs = door.worker("proto"), door.worker("victim")
    job = door.submit("victim", "another caller's input")
    async with door.worker_client(mine) as client, door.worker_client(theirs) as other:
        assert client.headers["Authorization"] != other.headers["Authorization"]
        # the key of proto's worker opens neither victim's routes nor another worker's
        for path in (
            f"/v2/victim/job-take/{mine.id}?gpu=x",
            route(theirs, "job-take"),
            route(theirs, "job-take-batch", "&batch_size=5"),
            f"/v2/proto/job-take/{theirs.id}?gpu=x",
        ):
            assert (await client.get(path)).status_code == 401, path
        forged = await client.post(done_route(theirs, job.id), content=json.dumps({"output": "forged"}))
        assert forged.status_code == 401
        assert job.status is JobStatus.IN_QUEUE  # untouched: still waiting for victim's own worker
        taken = await other.get(route(theirs, "job-take"))
        assert taken.status_code == 200 and taken.json()["id"] == job.id


@pytest.mark.slow
async def test_a_real_workers_key_is_its_own_and_opens_no_other_endpoint(make_embedded) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="victim", gpu=GpuType.NVIDIA_B200)
    async def victim(secret: str) -> str:
        return secret

    @Endpoint(name="thief", cpu="cpu3c-1-2")
    async def thief(base: str) -> dict[str, Any]:
        import os

        import httpx

        me, key = os.environ["FLASHPOINT_WORKER_ID"], os.environ["RUNPOD_AI_API_KEY"]
        async with httpx.AsyncClient(headers={"Authorization": key}) as client:
            stolen = await client.get(f"{base}/v2/victim/job-take/{me}?gpu=x")
            own = await client.get(f"{base}/v2/thief/ping/{me}?gpu=x")
        return {"stolen": stolen.status_code, "own": own.status_code, "key": key, "me": me}

    job = await victim.run("another caller's input")
    seen = await thief(embedded.url)
    assert seen["stolen"] == 401 and seen["own"] == 200
    assert seen["key"] == embedded.plane.worker_credential("thief", seen["me"])
    assert await job.status() == "IN_QUEUE"


async def test_a_binary_mark_is_kept_only_for_jobs_that_accept_binary_output() -> None:
    door, worker = await proto_worker()
    allowed = door.plane.submit("proto", {"n": 1}, {"flashpoint": {"binary_ok": True}})  # as the SDK submits
    json_only = door.submit("proto", {"n": 2})  # as an HTTP caller's job
    body = {"output": "gAWVBgAAAAAAAACMAmhplC4=", "outputEncoding": "cloudpickle-base64"}  # pickle of "hi"
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take-batch", "&batch_size=2"))
        for job in (allowed, json_only):
            await client.post(done_route(worker, job.id), content=json.dumps(body))
    assert (allowed.status, allowed.output_binary) == (JobStatus.COMPLETED, True)
    assert codec.decode_output(allowed.output, binary=allowed.output_binary) == "hi"
    assert (json_only.status, json_only.reason) == (JobStatus.FAILED, Reason.OUTPUT_NOT_SERIALIZABLE)
    assert json_only.error is not None and "accepts JSON only" in json_only.error.message
    assert not json_only.output_binary


async def test_a_job_input_with_a_lone_surrogate_is_handed_out_and_its_text_survives() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"s": "\ud800", "t": "é"})
    async with door.worker_client(worker) as client:
        taken = await client.get(route(worker, "job-take"))
        assert taken.status_code == 200, taken.text
        assert taken.json()["input"] == {"s": "\ud800", "t": "é"}
        record = {"error_type": "OSError", "error_message": "no file b'\\xff' \udcff", "error_traceback": "tb \udcff"}
        error = json.dumps({"error": json.dumps(record)})
        assert (await client.post(done_route(worker, job.id), content=error)).status_code == 200
    assert job.status is JobStatus.FAILED
    assert job.error is not None and job.error.message == "no file b'\\xff' \udcff"
    # and the native API serves the job and the list with that text in them
    native = httpx.ASGITransport(app=create_native_app(door.plane))
    async with httpx.AsyncClient(transport=native, base_url=BASE_URL) as client:
        for path in (f"/jobs/{job.id}", "/jobs"):
            answer = await client.get(path)
            assert answer.status_code == 200, path
        assert (await client.get(f"/jobs/{job.id}")).json()["error"]["message"] == "no file b'\\xff' \udcff"


async def test_a_result_over_the_limit_is_413_and_fails_its_job() -> None:
    door, worker = await proto_worker(max_result_bytes=10_000)
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take"))
        big = json.dumps({"output": "x" * 20_000})
        answer = await client.post(done_route(worker, job.id), content=big)
        assert answer.status_code == 413 and answer.json()["code"] == "payload_too_large"

        # streamed in chunks without a length: refused as it streams
        async def chunks() -> Any:
            for _ in range(5):
                yield b"x" * 4096

        streamed = await client.post(route(worker, "job-done-batch"), content=chunks())
        assert streamed.status_code == 413
    assert (job.status, job.reason) == (JobStatus.FAILED, Reason.OUTPUT_TOO_LARGE)


async def test_deeply_nested_worker_bodies_are_400_not_500() -> None:
    door, worker = await proto_worker()
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take"))
        deep = '{"output":' + "[" * 5000 + "]" * 5000 + "}"
        answer = await client.post(done_route(worker, job.id), content=deep)
        assert answer.status_code == 400 and answer.json()["code"] == "bad_json"
    assert job.status is JobStatus.IN_PROGRESS  # nothing accepted: the worker may post a sane result


async def test_watchdog_loses_a_worker_whose_pings_leave_out_a_job_it_holds() -> None:
    door, worker = await proto_worker(ping_interval_s=1, lost_job_grace_s=5)
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take"))
        # a heartbeat that names the job keeps it, however long it runs (a long job sends nothing else)
        for _ in range(20):
            await client.get(route(worker, "ping", f"&job_id={job.id}&runpod_version=1"))
            await door.step(1)  # the heartbeat's own pace, well inside the grace
        assert job.status is JobStatus.IN_PROGRESS

        # a wedged worker: alive and pinging, but no longer running the job it holds, and never posting it
        await client.get(route(worker, "ping", "&runpod_version=1"))
        await door.step(4.9)
        assert job.status is JobStatus.IN_PROGRESS  # not before the grace
        await door.step(0.1)
    assert job.status is JobStatus.IN_QUEUE
    assert job.retries == 1  # the retry rule: back to the front of the queue once
    assert worker.id not in door.plane.workers and worker.id in door.backend.stopped


async def test_watchdog_requeues_a_job_a_working_worker_dropped_and_keeps_the_worker() -> None:
    door, worker = await proto_worker(take_hold_s=30, ping_interval_s=1, lost_job_grace_s=5)
    job = door.submit("proto", {"n": 1})
    async with door.worker_client(worker) as client:
        await client.get(route(worker, "job-take"))
        # its post for the job failed for good (a Runpod worker then forgets the job): pings leave it out, but the
        # worker goes on pulling for new work
        await client.get(route(worker, "ping", "&runpod_version=1"))
        await door.step(1)
        take = asyncio.ensure_future(client.get(route(worker, "job-take")))
        await door.holding(worker)
        await door.step(3.9)
        assert not take.done() and job.status is JobStatus.IN_PROGRESS  # not before the grace
        await door.step(0.1)
        retaken = await asyncio.wait_for(take, 5)
    # the job went back to the front of its queue under the retry rule, and this same worker pulled it again
    assert retaken.status_code == 200 and retaken.json()["id"] == job.id
    assert job.retries == 1 and job.worker_id == worker.id and job.status is JobStatus.IN_PROGRESS
    assert worker.id in door.plane.workers and door.backend.stopped == []  # a working worker is kept
    # the stop it was due for its old copy is withdrawn by the retake: it must not cancel the job it runs now
    assert await door.plane.stop_signals("proto", worker.id, hold_s=0) == []
