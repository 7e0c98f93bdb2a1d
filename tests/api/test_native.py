"""The native /v1 API on a real embedded plane: every route, its errors, auth, the wait route and the OpenAPI schema."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.routing import Mount

from flashpoint import Endpoint, GpuGroup, GpuType
from flashpoint.api import schemas
from flashpoint.api.native import create_native_app, router
from flashpoint.embedded import EmbeddedServer
from flashpoint.jobs import JobStatus

pytestmark = pytest.mark.timeout(90)

T = TypeVar("T")
KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
FLEET = "NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2"


async def on_loop(embedded: EmbeddedServer, fn: Callable[[], T]) -> T:
    """``fn()`` computed on the plane's own loop, awaited from the test's loop (which stays free meanwhile)."""

    async def run() -> T:
        return fn()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), embedded.loop))


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20.0) -> None:
    """Poll an async condition on real processes until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


async def get(embedded: EmbeddedServer, app: Any, path: str, headers: dict[str, str] | None = None) -> httpx.Response:
    """GET ``path`` from ``app`` through ASGI, on the plane's loop, as uvicorn would serve it there."""

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://plane") as client:
            return await client.get(path, headers=AUTH if headers is None else headers)

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), embedded.loop))


def native(embedded: EmbeddedServer, keys: tuple[str, ...] = (KEY,)) -> Any:
    return create_native_app(embedded.plane, keys)


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


def gate_file(tmp_path: Path, name: str) -> Path:
    return tmp_path / f"gate-{name}"


# --------------------------------------------------------------------------------------------------------------------
# fleet and endpoints


async def test_fleet_lists_devices_and_who_holds_them(make_embedded: Any) -> None:
    embedded = make_embedded(FLEET)

    @Endpoint(name="warm", gpu=GpuGroup.AMPERE_80, workers=(1, 1))
    async def warm(x: int) -> int:
        return x

    assert await warm(3) == 3
    response = await get(embedded, native(embedded), "/fleet")

    assert response.status_code == 200
    body = response.json()
    check(schemas.Fleet, body)
    for row in body["devices"]:
        check(schemas.Device, row)
    assert [d["model"] for d in body["devices"]] == ["NVIDIA H200", "NVIDIA A100 80GB PCIe", "NVIDIA A100 80GB PCIe"]
    assert [d["endpoint"] for d in body["devices"]] == [None, "warm", None]
    assert body["devices"][1]["worker"].startswith("warm-")
    assert all(d["simulated"] and d["recognised"] and d["node"] == "node-a" for d in body["devices"])
    assert body["devices"][0]["pool"] == "HOPPER_141" and body["devices"][0]["vramGb"] == 141
    assert body["summary"] == "1 x NVIDIA H200 (simulated) on node-a, 2 x NVIDIA A100 80GB PCIe (simulated) on node-a"


async def test_endpoints_show_options_workers_counters_and_explanation(make_embedded: Any) -> None:
    embedded = make_embedded(FLEET)

    @Endpoint(
        name="flexible",
        gpu=[GpuType.NVIDIA_H200, GpuGroup.AMPERE_80],
        gpu_count=2,
        workers=(0, 3),
        idle_timeout=30,
        execution_timeout_ms=600_000,
        scaler_type="REQUEST_COUNT",
        scaler_value=2,
    )
    async def flexible(data: dict[str, Any]) -> dict[str, Any]:
        return data

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(data: dict[str, Any]) -> dict[str, Any]:
        return data

    assert await flexible({"a": 1}) == {"a": 1}
    queued = await never.run({"b": 2})
    app = native(embedded)

    listed = await get(embedded, app, "/endpoints")
    one = await get(embedded, app, "/endpoints/flexible")
    explained = await get(embedded, app, "/endpoints/never/explain")

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
    assert worker["placement"]["gpuModel"] == "NVIDIA A100 80GB PCIe" and worker["placement"]["deviceIds"] == [1, 2]
    assert body["explanation"]["endpoint"] == "flexible"

    never_body = by_name["never"]
    assert never_body["queueDepth"] == 1
    assert never_body["explanation"]["never"] is True
    explanation = explained.json()
    check(schemas.Explanation, explanation)
    assert explanation["never"] is True and explanation["queueDepth"] == 1
    assert [r["code"] for r in explanation["reasons"]] == ["not_in_fleet"]
    await queued.cancel()


async def test_unknown_names_are_404_not_found(make_embedded: Any) -> None:
    embedded = make_embedded(FLEET)
    app = native(embedded)

    for path in (
        "/endpoints/nope",
        "/endpoints/nope/explain",
        "/jobs/nope",
        "/jobs/nope/explain",
        "/jobs/nope/logs",
        "/jobs/nope/wait?timeout=0",
        "/no-such-route",
    ):
        body = check_error(await get(embedded, app, path), 404, "not_found")
        if "nope" in path:
            assert "nope" in body["message"]


# --------------------------------------------------------------------------------------------------------------------
# auth


@pytest.mark.parametrize(
    "path",
    ["/fleet", "/endpoints", "/endpoints/x", "/endpoints/x/explain", "/jobs", "/jobs/x", "/jobs/x/explain",
     "/jobs/x/logs", "/jobs/x/wait"],
)  # fmt: skip
async def test_every_route_needs_the_api_key(make_embedded: Any, path: str) -> None:
    embedded = make_embedded("")
    app = native(embedded)

    missing = await get(embedded, app, path, headers={})
    wrong = await get(embedded, app, path, headers={"Authorization": "Bearer not-the-key"})

    check_error(missing, 401, "unauthorized")
    check_error(wrong, 401, "unauthorized")


async def test_keys_raw_or_bearer_and_no_keys_means_no_auth(make_embedded: Any) -> None:
    embedded = make_embedded("")
    keyed = create_native_app(embedded.plane, ("first", KEY))
    open_app = create_native_app(embedded.plane, ())

    assert (await get(embedded, keyed, "/fleet", headers={"Authorization": KEY})).status_code == 200
    assert (await get(embedded, keyed, "/fleet", headers={"Authorization": "bearer first"})).status_code == 200
    assert (await get(embedded, open_app, "/fleet", headers={})).status_code == 200


# --------------------------------------------------------------------------------------------------------------------
# jobs


async def test_jobs_list_filters_newest_first_without_logs(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    @Endpoint(name="other", gpu=GpuType.NVIDIA_B200)
    async def other(n: int) -> int:
        return n

    jobs = []
    for n in range(3):
        jobs.append(await never.run(n))
        await asyncio.sleep(0.002)  # distinct creation times
    elsewhere = await other.run(9)
    cancelled = jobs[0]
    await cancelled.cancel()
    app = native(embedded)

    everything = (await get(embedded, app, "/jobs")).json()
    of_never = (await get(embedded, app, "/jobs?endpoint=never")).json()
    queued = (await get(embedded, app, "/jobs?endpoint=never&status=IN_QUEUE")).json()
    limited = (await get(embedded, app, "/jobs?limit=2")).json()
    nothing = (await get(embedded, app, "/jobs?endpoint=unknown")).json()

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
    for job in jobs[1:] + [elsewhere]:
        await job.cancel()


@pytest.mark.parametrize("query", ["status=DONE", "status=in_queue", "limit=0", "limit=1001", "limit=many"])
async def test_bad_job_filters_are_400_bad_request(make_embedded: Any, query: str) -> None:
    embedded = make_embedded("")

    body = check_error(await get(embedded, native(embedded), f"/jobs?{query}"), 400, "bad_request")

    assert query.partition("=")[0] in body["message"]


async def test_job_detail_logs_and_explanation(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="chatty", gpu=GpuType.NVIDIA_H200)
    async def chatty(word: str) -> dict[str, str]:
        print(f"said {word}")
        return {"word": word}

    handle = await chatty.run("hello")
    await handle.result(timeout=30)
    app = native(embedded)

    async def logged_line() -> bool:
        return bool((await get(embedded, app, f"/jobs/{handle.id}/logs")).json()["logs"] == ["said hello"])

    await until(logged_line, "the job's log line")  # output lines may arrive just after the result
    detail = await get(embedded, app, f"/jobs/{handle.id}")
    explained = await get(embedded, app, f"/jobs/{handle.id}/explain")
    logged = await get(embedded, app, f"/jobs/{handle.id}/logs")

    body = detail.json()
    check(schemas.Job, body)
    assert (body["id"], body["endpoint"], body["status"], body["reason"]) == (
        handle.id,
        "chatty",
        "COMPLETED",
        "completed",
    )
    assert body["logs"] == ["said hello"]
    assert body["placement"] == {"node": "node-a", "gpuModel": "NVIDIA H200", "deviceIds": [0], "simulated": True}
    assert body["workerId"].startswith("chatty-") and body["retries"] == 0 and body["error"] is None
    assert body["delayTime"] >= 0 and body["executionTime"] >= 0 and body["createdAt"] <= time.time()
    assert body["explanation"]["jobId"] == handle.id and body["explanation"]["summary"] == "completed"
    assert explained.json() == body["explanation"]
    check(schemas.JobLogs, logged.json())
    assert logged.json() == {"id": handle.id, "logs": ["said hello"]}


async def test_explain_a_queued_job_gives_its_position(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    first, second = await never.run(1), await never.run(2)

    body = (await get(embedded, native(embedded), f"/jobs/{second.id}/explain")).json()

    check(schemas.Explanation, body)
    assert (body["jobId"], body["status"], body["position"], body["queueDepth"]) == (second.id, "IN_QUEUE", 2, 2)
    assert body["never"] is True
    await first.cancel()
    await second.cancel()


# --------------------------------------------------------------------------------------------------------------------
# wait


async def test_wait_holds_until_the_job_ends(make_embedded: Any, tmp_path: Path) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="gated", gpu=GpuType.NVIDIA_H200)
    async def gated(gate: str) -> str:
        import asyncio
        import os

        while not os.path.exists(gate):
            await asyncio.sleep(0.01)
        return "opened"

    gate = gate_file(tmp_path, "wait")
    handle = await gated.run(str(gate))
    app = native(embedded)

    async def running() -> bool:
        return await on_loop(embedded, lambda: embedded.plane.job(handle.id).status) is JobStatus.IN_PROGRESS

    await until(running, "the job to start")

    waiting = asyncio.ensure_future(get(embedded, app, f"/jobs/{handle.id}/wait?timeout=30"))
    await asyncio.sleep(0.3)
    assert not waiting.done()
    started = time.monotonic()
    gate.touch()
    response = await asyncio.wait_for(waiting, 30)

    assert time.monotonic() - started < 10
    assert response.status_code == 200
    body = response.json()
    check(schemas.Job, body)
    assert (body["status"], body["output"]) == ("COMPLETED", "opened")
    assert body["explanation"]["status"] == "COMPLETED"


async def test_wait_answers_with_the_job_as_it_is_when_the_timeout_passes(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    handle = await never.run(1)
    app = native(embedded)

    started = time.monotonic()
    response = await get(embedded, app, f"/jobs/{handle.id}/wait?timeout=0.3")
    elapsed = time.monotonic() - started
    immediate = await get(embedded, app, f"/jobs/{handle.id}/wait?timeout=0")

    assert 0.25 <= elapsed < 5
    assert response.status_code == immediate.status_code == 200
    check(schemas.Job, response.json())
    assert response.json()["status"] == immediate.json()["status"] == "IN_QUEUE"
    assert response.json()["explanation"]["position"] == 1
    await handle.cancel()


async def test_wait_returns_at_once_for_a_finished_job_and_caps_the_timeout(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")

    @Endpoint(name="never", gpu=GpuType.NVIDIA_B200)
    async def never(n: int) -> int:
        return n

    handle = await never.run(1)
    await handle.cancel()
    app = native(embedded)

    started = time.monotonic()
    done = await get(embedded, app, f"/jobs/{handle.id}/wait")
    assert time.monotonic() - started < 5
    assert done.json()["status"] == JobStatus.CANCELLED.value
    for bad in ("61", "-1", "soon"):
        check_error(await get(embedded, app, f"/jobs/{handle.id}/wait?timeout={bad}"), 400, "bad_request")


# --------------------------------------------------------------------------------------------------------------------
# how the app is served: mounted at /v1, over real HTTP, and the OpenAPI schema


async def test_mounted_at_v1_the_app_reads_its_own_state(make_embedded: Any) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    root = Starlette(routes=[Mount("/v1", app=create_native_app(embedded.plane, (KEY,)))])

    fleet = await get(embedded, root, "/v1/fleet")
    denied = await get(embedded, root, "/v1/fleet", headers={})
    missing = await get(embedded, root, "/v1/jobs/nope")

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
    assert set(jobs_params) == {"endpoint", "status", "limit"}
    assert jobs_params["limit"]["schema"]["maximum"] == 1000
    wait_params = {p["name"]: p for p in paths["/v1/jobs/{job_id}/wait"]["get"]["parameters"]}
    assert wait_params["timeout"]["schema"]["maximum"] == 60
    assert set(components["JobStatus"]["enum"]) == {s.value for s in JobStatus}
