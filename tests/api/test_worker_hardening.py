"""The worker routes against hostile or broken workers, over real HTTP on loopback (issue 9): each worker's own key,
binary outputs marked out of band only where the job allowed them, text that UTF-8 cannot carry, bodies over the
limit, and the watchdog for a worker that keeps pinging but lost track of a job."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.embedded import EmbeddedServer
from flashpoint.scheduler.loop import Worker
from tests.api.test_worker_routes import _setup, _url

pytestmark = pytest.mark.timeout(60)


def _add_worker(embedded: EmbeddedServer, endpoint: str, worker_id: str) -> dict[str, str]:
    """A worker this test plays itself (its endpoint can never get a real one); returns its own headers."""

    async def add() -> None:
        worker = Worker(id=worker_id, endpoint=endpoint, devices=())
        embedded.plane.workers[worker.id] = worker
        embedded.plane.endpoints[endpoint].workers[worker.id] = worker

    embedded.run_sync(add())
    return {"Authorization": embedded.plane.worker_credential(endpoint, worker_id)}


async def test_each_worker_has_its_own_key_bound_to_its_id_and_endpoint(make_embedded) -> None:
    embedded, proto, mine = await _setup(make_embedded)

    @Endpoint(name="victim", gpu=GpuType.NVIDIA_B200)
    async def victim(secret: str) -> str:
        return secret

    job = await victim.run("another caller's input")
    other = _add_worker(embedded, "victim", "w-victim")
    assert mine["Authorization"] != other["Authorization"]
    async with httpx.AsyncClient(headers=mine) as client:
        # the key of proto's worker opens neither victim's routes nor another worker's
        for path in (
            f"{embedded.url}/v2/victim/job-take/w-test?gpu=x",
            f"{embedded.url}/v2/victim/job-take/w-victim?gpu=x",
            f"{embedded.url}/v2/victim/job-take-batch/w-victim?gpu=x&batch_size=5",
            _url(embedded, "job-take/w-victim?gpu=x"),
        ):
            assert (await client.get(path)).status_code == 401, path
        forged = await client.post(
            f"{embedded.url}/v2/victim/job-done/w-victim/{job.id}?gpu=x", content=json.dumps({"output": "forged"})
        )
        assert forged.status_code == 401
    assert await job.status() == "IN_QUEUE"  # untouched: still waiting for victim's own worker
    async with httpx.AsyncClient(headers=other) as client:
        taken = await client.get(f"{embedded.url}/v2/victim/job-take/w-victim?gpu=x")
        assert taken.status_code == 200 and taken.json()["id"] == job.id


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


async def test_a_binary_mark_is_kept_only_for_jobs_that_accept_binary_output(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    allowed = await proto.run({"n": 1})  # the SDK's jobs say binary_ok

    async def submit_json_only() -> str:
        return embedded.plane.submit("proto", {"data": {"n": 2}}, {}).id  # as an HTTP caller's job

    json_only = embedded.run_sync(submit_json_only())
    body = {"output": "gAWVBgAAAAAAAACMAmhplC4=", "outputEncoding": "cloudpickle-base64"}  # pickle of "hi"
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take-batch/w-test?gpu=x&batch_size=2"))
        for job_id in (allowed.id, json_only):
            await client.post(_url(embedded, f"job-done/w-test/{job_id}?gpu=x"), content=json.dumps(body))
    assert await allowed.result(timeout=5) == "hi"
    refused = embedded.run_sync(_view(embedded, json_only))
    assert (refused.status.value, refused.reason and refused.reason.value) == ("FAILED", "output_not_serializable")
    assert refused.error is not None and "accepts JSON only" in refused.error.message


async def _view(embedded: EmbeddedServer, job_id: str) -> Any:
    return embedded.plane.job(job_id).view()


async def test_a_job_input_with_a_lone_surrogate_is_handed_out_and_its_text_survives(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"s": "\ud800", "t": "é"})
    async with httpx.AsyncClient(headers=headers) as client:
        taken = await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        assert taken.status_code == 200, taken.text
        assert taken.json()["input"] == {"data": {"s": "\ud800", "t": "é"}}
        record = {"error_type": "OSError", "error_message": "no file b'\\xff' \udcff", "error_traceback": "tb \udcff"}
        error = json.dumps({"error": json.dumps(record)})
        assert (await client.post(_url(embedded, f"job-done/w-test/{job.id}?gpu=x"), content=error)).status_code == 200
        assert await job.wait(timeout=5) == "FAILED"
        assert job.view.error is not None and job.view.error.message == "no file b'\\xff' \udcff"
    async with httpx.AsyncClient(headers={"Authorization": embedded.api_key}) as client:
        for path in (f"/v1/jobs/{job.id}", "/v1/jobs"):
            answer = await client.get(embedded.url + path)
            assert answer.status_code == 200, path


async def test_a_result_over_the_limit_is_413_and_fails_its_job(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    embedded.plane.max_result_bytes = 10_000
    job = await proto.run({"n": 1})
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        big = json.dumps({"output": "x" * 20_000})
        answer = await client.post(_url(embedded, f"job-done/w-test/{job.id}?gpu=x"), content=big)
        assert answer.status_code == 413 and answer.json()["code"] == "payload_too_large"

        # streamed in chunks without a length: refused as it streams
        async def chunks() -> Any:
            for _ in range(5):
                yield b"x" * 4096

        streamed = await client.post(_url(embedded, "job-done-batch/w-test?gpu=x"), content=chunks())
        assert streamed.status_code == 413
    assert await job.wait(timeout=5) == "FAILED"
    assert job.view.reason is not None and job.view.reason.value == "output_too_large"


async def test_deeply_nested_worker_bodies_are_400_not_500(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    job = await proto.run({"n": 1})
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        deep = '{"output":' + "[" * 5000 + "]" * 5000 + "}"
        answer = await client.post(_url(embedded, f"job-done/w-test/{job.id}?gpu=x"), content=deep)
        assert answer.status_code == 400 and answer.json()["code"] == "bad_json"
        assert await job.status() == "IN_PROGRESS"  # nothing accepted: the worker may post a sane result


async def test_watchdog_loses_a_worker_whose_pings_leave_out_a_job_it_holds(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded)
    embedded.plane.lost_job_grace_s = 0.5
    job = await proto.run({"n": 1})
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        # a heartbeat that names the job keeps it, however long it runs (a long job sends nothing else)
        until = loop.time() + 1.5
        while loop.time() < until:
            await client.get(_url(embedded, f"ping/w-test?gpu=x&job_id={job.id}&runpod_version=1"))
            await asyncio.sleep(0.1)  # the heartbeat's own pace, well inside the grace
        assert await job.status() == "IN_PROGRESS"

        # a wedged worker: alive and pinging, but no longer running the job it holds, and never posting it
        await client.get(_url(embedded, "ping/w-test?gpu=x&runpod_version=1"))
        deadline = loop.time() + 10
        while await job.status() != "IN_QUEUE":
            assert loop.time() < deadline, "the watchdog did not give the job back"
            await asyncio.sleep(0.05)
    assert job.view.retries == 1  # the retry rule: back to the front of the queue once
    assert "w-test" not in embedded.plane.workers


async def test_watchdog_requeues_a_job_a_working_worker_dropped_and_keeps_the_worker(make_embedded) -> None:
    embedded, proto, headers = await _setup(make_embedded, hold_s="0.2")
    embedded.plane.lost_job_grace_s = 0.5
    job = await proto.run({"n": 1})
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(headers=headers) as client:
        await client.get(_url(embedded, "job-take/w-test?gpu=x"))
        # its post for the job failed for good (a Runpod worker then forgets the job): pings leave it out, but the
        # worker goes on pulling for new work
        await client.get(_url(embedded, "ping/w-test?gpu=x&runpod_version=1"))
        deadline = loop.time() + 10
        retaken = None
        while retaken is None:
            assert loop.time() < deadline, "the watchdog did not give the job back"
            answer = await client.get(_url(embedded, "job-take/w-test?gpu=x"))  # held 0.2 s when there is nothing
            retaken = answer.json() if answer.status_code == 200 else None
        # the job went back to the front of its queue under the retry rule, and this same worker pulled it again
        assert retaken["id"] == job.id
        await job.status()
        assert job.view.retries == 1 and job.view.worker_id == "w-test"
        assert "w-test" in embedded.plane.workers  # a working worker is kept
        # the stop it was due for its old copy is withdrawn by the retake: it must not cancel the job it runs now
        stop = await client.get(_url(embedded, "job-stop/w-test?gpu=x"))
        assert stop.status_code == 204
