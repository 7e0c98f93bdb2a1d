"""The native /v1 API: every route, its errors, auth, the wait route and the OpenAPI schema. The routes run in-process
(ASGI) over a door plane (StubBackend, FakeClock) whose workers the test plays; one test serves /v1 from a real
embedded plane over HTTP.

Covers ``flashpoint.api.errors`` (JSON error bodies) for tests/test_layout.py."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

from flashpoint import GpuGroup, GpuType
from flashpoint.api import schemas
from flashpoint.api.native import create_native_app, router
from flashpoint.jobs import JobStatus
from flashpoint.wire import protocol
from tests.scheduler.door import BASE_URL, Door, open_door

pytestmark = pytest.mark.timeout(30)

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
FLEET = "node-a=NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"


def native(door: Door, keys: tuple[str, ...] = (KEY,)) -> Any:
    return create_native_app(door.plane, keys)


async def get(app: Any, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``path`` from ``app`` through ASGI, on the test's loop (the door plane's own)."""
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as client:
        return await client.get(path, headers=AUTH if headers is None else headers)


def check(model: type[BaseModel], body: dict[str, Any]) -> None:
    """The body fits its documented schema and has exactly the documented keys (the schema cannot drift)."""
    model.model_validate(body)
    documented = {field.alias or name for name, field in model.model_fields.items()}
    assert set(body) == documented


def check_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert body["code"] == code
    assert body["message"] and body["error"] == body["message"]
    return body


async def run_one(door: Door, endpoint: str, output: Any = "ok", *, waited: float = 0.0, ran: float = 0.0) -> str:
    """A job of ``endpoint`` submitted, taken by its (only) worker after ``waited`` seconds, and finished ``ran``
    seconds later with ``output``; its id."""
    job = door.submit(endpoint)
    await door.settle()
    worker = door.worker(endpoint)
    door.clock.advance(waited)
    assert await door.pull(worker) == [job.id]
    door.clock.advance(ran)
    await door.finish(worker, job.id, output)
    return job.id


# --------------------------------------------------------------------------------------------------------------------
# fleet and endpoints


async def test_fleet_lists_devices_and_who_holds_them() -> None:
    door = await open_door(FLEET)
    door.endpoint(name="warm", gpu=GpuGroup.AMPERE_80, workers=(1, 1))
    await door.settle()
    assert await door.pull(door.worker("warm")) == []  # up and idle
    response = await get(native(door), "/fleet")

    assert response.status_code == 200
    body = response.json()
    check(schemas.Fleet, body)
    for row in body["devices"]:
        check(schemas.Device, row)
    assert [d["model"] for d in body["devices"]] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"]
    assert [d["endpoint"] for d in body["devices"]] == [None, "warm", None]
    assert body["devices"][1]["worker"] == door.worker("warm").id
    assert all(d["simulated"] and d["recognised"] and d["node"] == "node-a" for d in body["devices"])
    assert body["devices"][0]["pool"] == "HOPPER_141" and body["devices"][0]["vramGb"] == 141
    assert body["summary"] == "1 x NVIDIA H200 (simulated) on node-a, 2 x NVIDIA A100 80GB PCIe (simulated) on node-a"


async def test_endpoints_show_options_workers_counters_and_explanation() -> None:
    door = await open_door(FLEET)
    door.endpoint(
        name="flexible",
        gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80],
        gpu_count=2,
        workers=(0, 3),
        idle_timeout=30,
        execution_timeout_ms=600_000,
        scaler_type="REQUEST_COUNT",
        scaler_value=2,
    )
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    await run_one(door, "flexible", {"a": 1})
    door.submit("never", {"b": 2})
    app = native(door)

    listed = await get(app, "/endpoints")
    one = await get(app, "/endpoints/flexible")
    explained = await get(app, "/endpoints/never/explain")

    assert listed.status_code == one.status_code == explained.status_code == 200
    check(schemas.Endpoints, listed.json())
    by_name = {e["name"]: e for e in listed.json()["endpoints"]}
    assert sorted(by_name) == ["flexible", "never"]
    body = one.json()
    check(schemas.Endpoint, body)
    check(schemas.Explanation, body["explanation"])
    assert {k: body[k] for k in ("gpuCount", "workersMin", "workersMax", "idleTimeout", "executionTimeoutMs")} == {
        "gpuCount": 2,
        "workersMin": 0,
        "workersMax": 3,
        "idleTimeout": 30,
        "executionTimeoutMs": 600_000,
    }
    assert (body["scalerType"], body["scalerValue"], body["maxConcurrency"], body["cpu"]) == (
        "REQUEST_COUNT",
        2,
        1,
        None,
    )
    # the declared order is kept: the H200 first, then the AMPERE_80 pool in the seed's order
    assert body["candidates"] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100-SXM4-80GB"]
    assert body["gpu"] == "NVIDIA H200 > NVIDIA A100 80GB PCIe > NVIDIA A100-SXM4-80GB (x2)"
    assert body["counters"]["completed"] == 1 and body["counters"]["failed"] == 0
    assert body["queueDepth"] == 0
    (worker,) = body["workers"]
    check(schemas.Worker, worker)
    assert worker["state"] == "IDLE" and worker["id"] == door.worker("flexible").id
    assert worker["placement"]["gpuModel"] == "NVIDIA A100 80GB PCIe" and worker["placement"]["deviceIds"] == [1, 2]
    assert body["explanation"]["endpoint"] == "flexible"

    never_body = by_name["never"]
    assert never_body["queueDepth"] == 1
    assert never_body["explanation"]["never"] is True
    explanation = explained.json()
    check(schemas.Explanation, explanation)
    assert explanation["never"] is True and explanation["queueDepth"] == 1
    assert [r["code"] for r in explanation["reasons"]] == ["not_in_fleet"]


async def test_unknown_names_are_404_not_found() -> None:
    door = await open_door(FLEET)
    app = native(door)

    for path in (
        "/endpoints/nope",
        "/endpoints/nope/explain",
        "/jobs/nope",
        "/jobs/nope/explain",
        "/jobs/nope/logs",
        "/jobs/nope/wait?timeout=0",
        "/no-such-route",
    ):
        body = check_error(await get(app, path), 404, "not_found")
        if "nope" in path:
            assert "nope" in body["message"]


# --------------------------------------------------------------------------------------------------------------------
# auth


@pytest.mark.parametrize(
    "path",
    ["/fleet", "/endpoints", "/endpoints/x", "/endpoints/x/explain", "/jobs", "/jobs/x", "/jobs/x/explain",
     "/jobs/x/logs", "/jobs/x/wait"],
)  # fmt: skip
async def test_every_route_needs_the_api_key(path: str) -> None:
    app = native(await open_door(FLEET))

    missing = await get(app, path, headers={})
    wrong = await get(app, path, headers={"Authorization": "Bearer not-the-key"})

    check_error(missing, 401, "unauthorized")
    check_error(wrong, 401, "unauthorized")


async def test_keys_raw_or_bearer_and_no_keys_means_no_auth() -> None:
    door = await open_door(FLEET)
    keyed = native(door, ("first", KEY))
    open_app = native(door, ())

    assert (await get(keyed, "/fleet", headers={"Authorization": KEY})).status_code == 200
    assert (await get(keyed, "/fleet", headers={"Authorization": "bearer first"})).status_code == 200
    assert (await get(open_app, "/fleet", headers={})).status_code == 200


# --------------------------------------------------------------------------------------------------------------------
# jobs


async def test_jobs_list_filters_newest_first_without_logs() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    door.endpoint(name="other", gpu=GpuType.NVIDIA_B200)
    jobs = []
    for n in range(3):
        jobs.append(door.submit("never", n))
        door.clock.advance(0.01)  # distinct creation times
    elsewhere = door.submit("other", 9)
    cancelled = jobs[0]
    door.plane.cancel(cancelled.id)
    app = native(door)

    everything = (await get(app, "/jobs")).json()
    of_never = (await get(app, "/jobs?endpoint=never")).json()
    queued = (await get(app, "/jobs?endpoint=never&status=IN_QUEUE")).json()
    limited = (await get(app, "/jobs?limit=2")).json()
    nothing = (await get(app, "/jobs?endpoint=unknown")).json()

    check(schemas.Jobs, everything)
    for job in everything["jobs"]:
        check(schemas.JobSummary, job)
    assert [j["id"] for j in everything["jobs"]] == [elsewhere.id, jobs[2].id, jobs[1].id, jobs[0].id]
    assert [j["id"] for j in of_never["jobs"]] == [jobs[2].id, jobs[1].id, jobs[0].id]
    assert [j["id"] for j in queued["jobs"]] == [jobs[2].id, jobs[1].id]
    assert [j["id"] for j in limited["jobs"]] == [elsewhere.id, jobs[2].id]
    assert nothing == {"jobs": []}
    first = of_never["jobs"][-1]
    assert (first["status"], first["reason"], first["endpoint"]) == ("CANCELLED", "cancelled", "never")
    assert first["error"]["type"] == "Cancelled"


@pytest.mark.parametrize("query", ["status=DONE", "status=in_queue", "limit=0", "limit=1001", "limit=many"])
async def test_bad_job_filters_are_400_bad_request(query: str) -> None:
    app = native(await open_door(FLEET))

    body = check_error(await get(app, f"/jobs?{query}"), 400, "bad_request")

    assert query.partition("=")[0] in body["message"]


async def test_job_detail_logs_and_explanation() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="chatty", gpu=GpuType.NVIDIA_H200)
    job = door.submit("chatty", "hello")
    await door.settle()
    worker = door.worker("chatty")
    door.clock.advance(2)
    await door.pull(worker)
    door.backend.line(worker.id, "stdout", f"{protocol.tag_line(job.id)}said hello")  # printed while the job ran
    door.backend.line(worker.id, "stdout", "between jobs")  # untagged: the worker's own line, in no job's log
    door.clock.advance(3)
    await door.finish(worker, job.id, {"word": "hello"})
    app = native(door)

    detail = await get(app, f"/jobs/{job.id}")
    explained = await get(app, f"/jobs/{job.id}/explain")
    logged = await get(app, f"/jobs/{job.id}/logs")

    body = detail.json()
    check(schemas.Job, body)
    assert (body["id"], body["endpoint"]) == (job.id, "chatty")
    assert (body["status"], body["reason"]) == ("COMPLETED", "completed")
    assert body["output"] == {"word": "hello"}
    assert body["logs"] == ["said hello"]
    assert body["placement"] == {"node": "node-a", "gpuModel": "NVIDIA H200", "deviceIds": [0], "simulated": True}
    assert body["workerId"] == worker.id and body["retries"] == 0 and body["error"] is None
    assert (body["delayTime"], body["executionTime"]) == (2000, 3000)
    assert body["createdAt"] == door.clock.time() - 5
    assert body["explanation"]["jobId"] == job.id and body["explanation"]["summary"] == "completed"
    assert body["flash"] is None  # not a call through Flash's client
    assert explained.json() == body["explanation"]
    check(schemas.JobLogs, logged.json())
    assert logged.json() == {"id": job.id, "logs": ["said hello"]}


async def test_explain_a_queued_job_gives_its_position() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    door.submit("never", 1)
    second = door.submit("never", 2)

    body = (await get(native(door), f"/jobs/{second.id}/explain")).json()

    check(schemas.Explanation, body)
    assert (body["jobId"], body["status"], body["position"], body["queueDepth"]) == (second.id, "IN_QUEUE", 2, 2)
    assert body["never"] is True


# --------------------------------------------------------------------------------------------------------------------
# wait


async def test_wait_holds_until_the_job_ends() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="gated", gpu=GpuType.NVIDIA_H200)
    job = door.submit("gated")
    await door.settle()
    worker = door.worker("gated")
    await door.pull(worker)

    waiting = asyncio.ensure_future(get(native(door), f"/jobs/{job.id}/wait?timeout=30"))
    for _ in range(1000):  # bounded: until the route waits on the job
        if door.plane.book.waiters.waits_for(job.id):
            break
        await asyncio.sleep(0)
    assert door.plane.book.waiters.waits_for(job.id) and not waiting.done()
    await door.finish(worker, job.id, "opened")
    response = await asyncio.wait_for(waiting, 5)  # at once, not after the 30 s timeout

    assert response.status_code == 200
    body = response.json()
    check(schemas.Job, body)
    assert (body["status"], body["output"]) == ("COMPLETED", "opened")
    assert body["explanation"]["status"] == "COMPLETED"


async def test_wait_answers_with_the_job_as_it_is_when_the_timeout_passes() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    job = door.submit("never", 1)
    app = native(door)
    loop = asyncio.get_running_loop()

    started = loop.time()
    response = await get(app, f"/jobs/{job.id}/wait?timeout=0.05")  # the wait's timer is the loop's, not the clock's
    elapsed = loop.time() - started
    immediate = await get(app, f"/jobs/{job.id}/wait?timeout=0")

    assert 0.05 <= elapsed < 5
    assert response.status_code == immediate.status_code == 200
    check(schemas.Job, response.json())
    assert response.json()["status"] == immediate.json()["status"] == "IN_QUEUE"
    assert response.json()["explanation"]["position"] == 1


async def test_wait_returns_at_once_for_a_finished_job_and_caps_the_timeout() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    door.endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    job = door.submit("never", 1)
    door.plane.cancel(job.id)
    app = native(door)

    done = await asyncio.wait_for(get(app, f"/jobs/{job.id}/wait"), 5)  # not after the default 30 s
    assert done.json()["status"] == JobStatus.CANCELLED.value
    for bad in ("61", "-1", "soon"):
        check_error(await get(app, f"/jobs/{job.id}/wait?timeout={bad}"), 400, "bad_request")


# --------------------------------------------------------------------------------------------------------------------
# how the app is served: mounted at /v1, over real HTTP, and the OpenAPI schema


async def test_mounted_at_v1_the_app_reads_its_own_state() -> None:
    door = await open_door("node-a=NVIDIA_H200:1")
    root = Starlette(routes=[Mount("/v1", app=create_native_app(door.plane, (KEY,)))])

    fleet = await get(root, "/v1/fleet")
    denied = await get(root, "/v1/fleet", headers={})
    missing = await get(root, "/v1/jobs/nope")

    assert fleet.status_code == 200 and fleet.json()["devices"][0]["model"] == "NVIDIA H200"
    check_error(denied, 401, "unauthorized")
    check_error(missing, 404, "not_found")


async def test_the_embedded_plane_serves_v1_over_http(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    async with httpx.AsyncClient(base_url=embedded.url, trust_env=False) as client:
        fleet = await client.get("/v1/fleet", headers={"Authorization": f"Bearer {embedded.api_key}"})
        endpoints = await client.get("/v1/endpoints", headers={"Authorization": embedded.api_key})
        denied = await client.get("/v1/fleet")

    assert fleet.status_code == 200 and len(fleet.json()["devices"]) == 1
    assert endpoints.json() == {"endpoints": []}
    check_error(denied, 401, "unauthorized")


def test_openapi_documents_every_v1_path_and_its_schemas() -> None:
    app = FastAPI()
    app.include_router(router, prefix="/v1")

    spec = app.openapi()

    paths = spec["paths"]
    expected = {
        "/v1/fleet": "Fleet",
        "/v1/endpoints": "Endpoints",
        "/v1/endpoints/{name}": "Endpoint",
        "/v1/endpoints/{name}/explain": "Explanation",
        "/v1/jobs": "Jobs",
        "/v1/jobs/{job_id}": "Job",
        "/v1/jobs/{job_id}/explain": "Explanation",
        "/v1/jobs/{job_id}/logs": "JobLogs",
        "/v1/jobs/{job_id}/wait": "Job",
        "/v1/schedules": "Schedules",
        "/v1/schedules/{endpoint}": "ScheduleHistory",
        "/v1/usage": "Usage",
    }
    assert set(paths) == set(expected)
    for path, model in expected.items():
        responses = paths[path]["get"]["responses"]
        ok = responses["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{model}"}, path
        assert responses["401"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorBody"
        if "{" in path:
            assert "404" in responses, path
    components = spec["components"]["schemas"]
    for name in ("Device", "Worker", "Placement", "WaitReason", "JobSummary", "JobError", "ErrorBody"):
        assert name in components
    assert set(components["Endpoint"]["required"]) >= {"gpuCount", "workersMin", "queueDepth", "explanation"}
    jobs_params = {p["name"]: p for p in paths["/v1/jobs"]["get"]["parameters"]}
    assert set(jobs_params) == {"endpoint", "status", "limit", "app", "env"}
    endpoints_params = {p["name"] for p in paths["/v1/endpoints"]["get"]["parameters"]}
    assert endpoints_params == {"app", "env"}
    assert {"app", "env"} <= set(components["JobSummary"]["properties"]) & set(components["Endpoint"]["properties"])
    assert jobs_params["limit"]["schema"]["maximum"] == 1000
    wait_params = {p["name"]: p for p in paths["/v1/jobs/{job_id}/wait"]["get"]["parameters"]}
    assert wait_params["timeout"]["schema"]["maximum"] == 60
    assert set(components["JobStatus"]["enum"]) == {s.value for s in JobStatus}
