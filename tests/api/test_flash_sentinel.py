"""The sentinel routes as Runpod SDK 2.x's App API uses them (``api/flashroute.py``, decision 0110): ``run``,
``runsync``, ``status``, ``stream``, ``cancel`` and ``retry`` under ``/v2/flash/`` with ``X-Flash-App``,
``X-Flash-Environment`` and ``X-Flash-Endpoint``. The server's whole app (``Dispatch``, as ``flashpoint serve`` serves
it) runs in-process over a door plane whose workers the test plays. Flash 1.x's runsync: tests/api/test_flash_route.py;
rc2's real client against a real server: tests/e2e/test_rc2_client.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuGroup
from flashpoint.access import Principal
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.flashroute import METHODS, STREAM_HOLD_MS, is_flash_call
from flashpoint.api.runpod import Intake
from flashpoint.hosting import shapes
from flashpoint.jobs import JobStatus
from flashpoint.scheduler.credentials import caller_credential
from flashpoint.worker.handler import error_body
from tests.scheduler.door import BASE_URL, TARGET, Door, open_door

pytestmark = pytest.mark.timeout(30)

KEY = "sentinel-key"
#: what rc2 sends (``runpod/user_agent.py``), and what runpod-flash 1.21 sends (``core/utils/user_agent.py``)
RC2_AGENT = "RunPod-Python-SDK/2.0.0rc2 (Linux 6.8.0; x86_64) Language/Python 3.11.9"
FLASH1_AGENT = "Runpod Flash/1.21.0 (Python 3.11.9; Linux 6.8.0; x86_64)"
#: scoped keys (``principal_lookup``'s answers): invoke keys of shop (two of them), a deploy key of shop, one of lab
SCOPED = {
    "fpk_shop": Principal("shop-ci", "invoke", "shop", None),
    "fpk_shop_peer": Principal("shop-peer", "invoke", "shop", None),
    "fpk_shop_deploy": Principal("shop-deploy", "deploy", "shop", None),
    "fpk_lab": Principal("lab-ci", "invoke", "lab", None),
}
ABSENT = "0" * 24 + "-fp"  # a job id of the right shape that no job has


@Endpoint(name="add", gpu=GpuGroup.ANY)
async def add(a: int, b: int) -> int:
    return a + b


@Endpoint(name="ping")
def ping() -> str:
    return "pong"


@Endpoint(name="count")
def count(n: int) -> Iterator[int]:
    yield from range(n)


#: what is deployed: ``add`` in two apps (rc2's default environment), ``ping`` and ``count`` in shop only
DEPLOYED: list[tuple[str, Any]] = [("shop", add), ("lab", add), ("shop", ping), ("shop", count)]


@dataclass
class Sentinel:
    door: Door
    client: httpx.AsyncClient

    async def call(
        self,
        verb: str,
        job_id: str | None = None,
        body: Any = None,
        *,
        app: str | None = "shop",
        env: str | None = "default",
        endpoint: str = "add",
        key: str | None = KEY,
        agent: str = RC2_AGENT,
        query: str = "",
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> httpx.Response:
        """A request as rc2's ``QueueClient`` sends it: its headers (``Content-Type`` on every verb), its key."""
        sent = [("X-Flash-Endpoint", endpoint), ("User-Agent", agent), ("Content-Type", content_type)]
        sent += [(name, value) for name, value in (("X-Flash-App", app), ("X-Flash-Environment", env)) if value]
        if key is not None:
            sent.append(("Authorization", f"Bearer {key}"))
        path = f"/v2/flash/{verb}" + (f"/{job_id}" if job_id is not None else "") + query
        content = json.dumps(body).encode() if body is not None else None
        return await self.client.request(METHODS[verb], path, content=content, headers=headers or sent)

    async def run(self, payload: Any = None, **options: Any) -> str:
        response = await self.call("run", body={"input": {"a": 1, "b": 2} if payload is None else payload}, **options)
        assert response.status_code == 200, response.text
        assert response.json()["status"] == "IN_QUEUE"
        return str(response.json()["id"])

    async def take(self, endpoint: str) -> str:
        """The endpoint's worker takes its one queued job; its id."""
        await self.door.settle()
        (job,) = await self.door.plane.take(endpoint, self.door.worker(endpoint).id, 1, hold_s=0)
        return str(job["id"])

    def worker_posts(self, endpoint: str, job_id: str, body: dict[str, Any]) -> None:
        self.door.plane.done(endpoint, self.door.worker(endpoint).id, job_id, body)

    def chunk(self, endpoint: str, job_id: str, output: Any) -> None:
        self.door.plane.chunk(endpoint, self.door.worker(endpoint).id, job_id, {"output": output})


async def turns(task: asyncio.Future[Any], count: int = 300) -> None:
    """Let the loop turn (not time pass) and check ``task`` is still held."""
    for _ in range(count):
        await asyncio.sleep(0)
    assert not task.done(), task.result().text


def checkers() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for app, handle in DEPLOYED:
        found.update(shapes.checkers(f"{app}.default.{handle.spec.name}", shapes.shape_of(handle), "queue"))
    return found


@pytest.fixture
async def sentinel() -> AsyncIterator[Sentinel]:
    door = await open_door("node-a=NVIDIA_H200:2")
    for app_name, handle in DEPLOYED:
        door.plane.register(dataclasses.replace(handle.spec, app=app_name, app_env="default"), TARGET)
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake(checkers()), max_body_bytes=4096)
    app.state.key_lookup = SCOPED.get
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=Dispatch(app, door.plane)), base_url=BASE_URL) as c:
        yield Sentinel(door, c)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["error"] == body["message"]
    return str(body["message"])


def nothing_stored(door: Door) -> bool:
    return all(not state.queued for state in door.plane.endpoints.values())


# --------------------------------------------------------------------------------------------------------------------
# Which requests come here


@pytest.mark.parametrize(
    ("path", "header", "flash"),
    [
        ("/v2/flash/runsync", True, True),
        ("/v2/flash/run", True, True),
        ("/v2/flash/status/abc", True, True),
        ("/v2/flash/stream/abc", True, True),
        ("/v2/flash/cancel/abc", True, True),
        ("/v2/flash/retry/abc", True, True),
        ("/v2/flash/run", False, False),  # Runpod's route of an endpoint named flash
        ("/v2/flash/status/abc", False, False),
        ("/v2/flash/health", True, False),
        ("/v2/flash/purge-queue", True, False),
        ("/v2/flash/status/abc/more", True, False),
        ("/v2/flash/status/", True, False),
        ("/v2/add/run", True, False),
    ],
)
def test_the_sentinel_routes_are_the_six_verbs_with_the_endpoint_header(path: str, header: bool, flash: bool) -> None:
    headers = [(b"x-flash-endpoint", b"add")] if header else [(b"x-flash-app", b"shop")]
    assert is_flash_call({"type": "http", "path": path, "headers": headers}) is flash


@pytest.mark.parametrize(("verb", "wrong"), [("run", "GET"), ("runsync", "GET"), ("status", "POST"), ("cancel", "GET")])
async def test_each_verb_has_its_method(sentinel: Sentinel, verb: str, wrong: str) -> None:
    path = f"/v2/flash/{verb}" + ("" if verb.startswith("run") else f"/{ABSENT}")
    response = await sentinel.client.request(wrong, path, headers={"X-Flash-Endpoint": "add"})
    assert METHODS[verb] in refused(response, 405, "method_not_allowed")


# --------------------------------------------------------------------------------------------------------------------
# Submitting


async def test_run_answers_a_job_id_that_every_verb_takes_with_the_same_headers(sentinel: Sentinel) -> None:
    job_id = await sentinel.run({"__empty": True}, endpoint="ping")

    job = sentinel.door.plane.job(job_id)
    assert job.endpoint == "shop.default.ping" and job.input == {}  # rc2's marker for no arguments is dropped
    assert job.extra["flashpoint"]["flash"] == {"app": "shop", "environment": "default"}
    status = await sentinel.call("status", job_id, endpoint="ping")
    assert status.status_code == 200 and status.json()["status"] == "IN_QUEUE" and "error" not in status.json()
    stream = await sentinel.call("stream", job_id, endpoint="ping", query="?wait=1")
    assert stream.json() == {"id": job_id, "status": "IN_QUEUE", "stream": []}
    cancel = await sentinel.call("cancel", job_id, endpoint="ping")
    assert cancel.json()["status"] == "CANCELLED" and cancel.json()["error"]
    # only a FAILED or TIMED_OUT job runs again
    refused(await sentinel.call("retry", job_id, endpoint="ping"), 409, "invalid_transition")


@pytest.mark.parametrize("agent", [RC2_AGENT, FLASH1_AGENT, "python-httpx/0.28"])
@pytest.mark.parametrize(
    ("result", "answer"),
    [
        ({"output": 3}, {"status": "COMPLETED", "output": 3}),
        ({"output": None}, {"status": "COMPLETED", "output": None}),  # present: both would return the body
        (error_body(ValueError("boom")), {"status": "FAILED", "error": "ValueError: boom"}),
    ],
    ids=["output", "none", "failed"],
)
async def test_runsync_of_a_job_that_ends_in_the_hold_answers_every_client_alike(
    sentinel: Sentinel, agent: str, result: dict[str, Any], answer: dict[str, Any]
) -> None:
    task = asyncio.ensure_future(sentinel.call("runsync", body={"input": {"a": 1, "b": 2}}, agent=agent))
    await sentinel.door.settle()
    await turns(task, 50)
    job_id = await sentinel.take("shop.default.add")
    sentinel.worker_posts("shop.default.add", job_id, result)

    body = (await task).json()
    assert body["id"] == job_id and {key: body.get(key) for key in answer} == answer


@pytest.mark.parametrize(
    ("agent", "shape"),
    [
        (RC2_AGENT + " Integration/notebook", "runpod"),  # rc2 polls /flash/status/{id}: an error would make it raise
        (FLASH1_AGENT, "flash"),  # Flash 1.x returns a body without error as the result: it must raise
        ("python-httpx/0.28", "flash"),  # anyone else: Flash's answer, as before rc2
    ],
)
async def test_runsync_still_running_when_the_hold_ends_answers_each_client_its_way(
    sentinel: Sentinel, agent: str, shape: str
) -> None:
    # nobody takes the job: the hold (1 s, the shortest) ends with it queued
    response = await sentinel.call("runsync", body={"input": {"a": 1, "b": 2}}, agent=agent, query="?wait=1000")

    body = response.json()
    assert response.status_code == 200 and body["status"] == "IN_QUEUE"
    if shape == "runpod":
        assert body == {"id": body["id"], "status": "IN_QUEUE"}
    else:
        assert "still IN_QUEUE after 1 s; it goes on" in body["error"]
    assert sentinel.door.plane.job(body["id"]).status is JobStatus.IN_QUEUE


@pytest.mark.parametrize("verb", ["run", "runsync"])
@pytest.mark.parametrize(
    ("app", "env", "endpoint", "says"),
    [
        ("shop", "production", "add", "app 'shop' has no environment 'production'"),
        ("shop", "default", "nowhere", "no endpoint named 'shop.default.nowhere'"),
        ("ghost", "default", "nowhere", "app 'ghost' is not deployed; deploy it first with 'flashpoint deploy'"),
        (
            "ghost",
            "default",
            "add",
            "app 'ghost' is not deployed; deploy it first with 'flashpoint deploy'; 'add' is deployed as "
            "lab.default.add, shop.default.add",
        ),
    ],
    ids=["env", "endpoint", "app-and-endpoint", "app"],
)
async def test_what_is_not_deployed_is_404_on_run_and_runsync(
    sentinel: Sentinel, verb: str, app: str, env: str, endpoint: str, says: str
) -> None:
    response = await sentinel.call(verb, body={"input": {"a": 1, "b": 2}}, app=app, env=env, endpoint=endpoint)

    assert refused(response, 404, "not_found").startswith(says)
    assert nothing_stored(sentinel.door)


async def test_two_apps_with_a_same_named_endpoint_each_reach_their_own(sentinel: Sentinel) -> None:
    shop = await sentinel.run(app="shop")
    lab = await sentinel.run(app="lab")

    assert sentinel.door.plane.job(shop).endpoint == "shop.default.add"
    assert sentinel.door.plane.job(lab).endpoint == "lab.default.add"
    for job_id, app in ((shop, "shop"), (lab, "lab")):
        assert (await sentinel.call("status", job_id, app=app)).json()["id"] == job_id
    # the other app's headers do not name the job: it is not theirs
    for job_id, other in ((shop, "lab"), (lab, "shop")):
        for verb in ("status", "stream", "cancel", "retry"):
            refused(await sentinel.call(verb, job_id, app=other), 404, "not_found")
    assert sentinel.door.plane.job(shop).status is JobStatus.IN_QUEUE  # nothing was cancelled


async def test_a_job_submitted_on_runpods_route_is_reached_by_the_headers_naming_its_endpoint(
    sentinel: Sentinel,
) -> None:
    response = await sentinel.client.post(
        "/v2/shop.default.add/run", json={"input": {"a": 1, "b": 2}}, headers={"Authorization": f"Bearer {KEY}"}
    )
    job_id = response.json()["id"]

    assert (await sentinel.call("status", job_id)).json()["status"] == "IN_QUEUE"
    refused(await sentinel.call("status", job_id, endpoint="ping"), 404, "not_found")


# --------------------------------------------------------------------------------------------------------------------
# Policy and options


@pytest.mark.parametrize(
    ("options", "execution_ms", "ttl_ms", "low"),
    [
        ({"policy": {"executionTimeout": 5000, "ttl": 60_000}}, 5000, 60_000, None),
        ({"policy": {"lowPriority": True}}, None, None, True),
        ({"policy": {"lowPriority": False, "ttl": 20_000}}, None, 20_000, None),
        ({"policy": {"executionTimeout": 7000, "ttl": 90_000, "lowPriority": True}}, 7000, 90_000, True),
        ({"policy": {"someday": 1}}, None, None, None),  # unknown keys pass to the worker, as on /run
        ({"s3Config": {"bucketName": "b"}, "webhook": "https://example.com/hook"}, None, None, None),
    ],
    ids=["timeouts", "low", "not-low", "all-three", "unknown-key", "s3-and-webhook"],
)
async def test_options_are_taken_as_on_run_and_low_priority_is_recorded(
    sentinel: Sentinel, options: dict[str, Any], execution_ms: int | None, ttl_ms: int | None, low: bool | None
) -> None:
    response = await sentinel.call("run", body={"input": {"a": 1, "b": 2}, **options})

    assert response.status_code == 200, response.text
    job = sentinel.door.plane.job(response.json()["id"])
    if execution_ms is not None:
        assert job.execution_timeout_ms == execution_ms
    if ttl_ms is not None:
        assert job.ttl_ms == ttl_ms
    assert job.low_priority is bool(low)  # the scheduler's field (taken out of the job's metadata as it is made)
    assert "low_priority" not in job.extra.get("flashpoint", {})
    # the worker gets the options as Runpod hands them on (policy, webhook, s3Config)
    assert {key: job.extra[key] for key in options} == options


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"policy": {"lowPriority": "yes"}}, "policy.lowPriority must be true or false, got 'yes'"),
        ({"policy": {"lowPriority": 1}}, "policy.lowPriority must be true or false, got 1"),
        ({"policy": {"lowPriority": None}}, "policy.lowPriority must be true or false, got None"),
        ({"policy": {"executionTimeout": 0}}, "policy.executionTimeout must be milliseconds"),
        ({"policy": {"ttl": "1h"}}, "policy.ttl must be milliseconds"),
        ({"policy": "fast"}, '"policy" must be an object'),
        ({"webhook": "ftp://example.com"}, '"webhook" must be an http(s) URL'),
    ],
)
@pytest.mark.parametrize("verb", ["run", "runsync"])
async def test_bad_options_are_400_naming_them(
    sentinel: Sentinel, verb: str, options: dict[str, Any], says: str
) -> None:
    response = await sentinel.call(verb, body={"input": {"a": 1, "b": 2}, **options})

    assert says in refused(response, 400, "bad_request")
    assert nothing_stored(sentinel.door)


async def test_input_that_does_not_fit_is_400(sentinel: Sentinel) -> None:
    assert "'b'" in refused(await sentinel.call("run", body={"input": {"a": 1}}), 400, "bad_input")
    refused(await sentinel.call("run", body={"inputs": {}}), 400, "missing_input")
    assert nothing_stored(sentinel.door)


# --------------------------------------------------------------------------------------------------------------------
# Following a job


@pytest.mark.parametrize("verb", ["status", "stream", "cancel", "retry"])
@pytest.mark.parametrize("job_id", [ABSENT, "nope", "x" * 300])
async def test_a_job_that_does_not_exist_is_404(sentinel: Sentinel, verb: str, job_id: str) -> None:
    refused(await sentinel.call(verb, job_id, query="?wait=1" if verb == "stream" else ""), 404, "not_found")


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Flash-Endpoint", "add"), ("X-Flash-Endpoint", "ping")],
        [("X-Flash-Endpoint", "add"), ("X-Flash-App", "a" * 129)],
        [("X-Flash-Endpoint", "")],
    ],
    ids=["twice", "long-app", "empty"],
)
async def test_hostile_headers_are_400_on_a_jobs_verbs_too(sentinel: Sentinel, headers: list[tuple[str, str]]) -> None:
    job_id = await sentinel.run()
    sent = [*headers, ("Authorization", f"Bearer {KEY}")]
    refused(await sentinel.call("status", job_id, headers=sent), 400, "bad_request")


@pytest.mark.parametrize(
    ("key", "status"),
    [
        (KEY, 200),  # the server's key
        ("fpk_shop_deploy", 200),  # a deploy key of the job's app reads anyone's jobs
        ("fpk_shop_peer", 403),  # an invoke key of the app: only its own (403 naming the scope, as /v2/{id}/status)
        ("fpk_lab", 404),  # a key of another app: hidden is absent
        ("wrong", 401),
    ],
)
@pytest.mark.parametrize("verb", ["status", "stream", "cancel"])
async def test_another_keys_job_follows_the_rules_of_runpods_status(
    sentinel: Sentinel, verb: str, key: str, status: int
) -> None:
    job_id = await sentinel.run(key="fpk_shop")

    response = await sentinel.call(verb, job_id, key=key, query="?wait=1" if verb == "stream" else "")

    assert response.status_code == status, response.text
    # its own key reaches it
    assert (await sentinel.call("status", job_id, key="fpk_shop")).status_code == 200


async def test_a_workers_caller_key_follows_the_jobs_it_started_only(sentinel: Sentinel) -> None:
    await sentinel.run(endpoint="ping", payload={})
    worker = sentinel.door.worker("shop.default.ping")
    secret = sentinel.door.plane.worker_credential("shop.default.ping", worker.id)
    caller = caller_credential(secret, "shop.default.ping", worker.id)  # what the worker gets as its caller key
    others = await sentinel.run()

    mine = await sentinel.run(key=caller)  # fan-out to its own app's add
    assert (await sentinel.call("status", mine, key=caller)).status_code == 200
    refused(await sentinel.call("status", others, key=caller), 404, "not_found")
    refused(await sentinel.call("retry", mine, key=caller), 403, "forbidden")
    assert (await sentinel.call("cancel", mine, key=caller)).json()["status"] == "CANCELLED"


async def test_a_job_whose_endpoint_was_undeployed_still_answers(sentinel: Sentinel) -> None:
    job_id = await sentinel.run(endpoint="ping", payload={})
    done = await sentinel.run(endpoint="count", payload={"n": 1})
    assert await sentinel.take("shop.default.count") == done
    sentinel.worker_posts("shop.default.count", done, {"output": [0]})
    for name in ("ping", "count", "add"):
        sentinel.door.plane.unregister(f"shop.default.{name}", reason="undeployed")  # the whole app goes

    status = (await sentinel.call("status", job_id, endpoint="ping")).json()
    assert status["status"] == "FAILED" and status["error"] == "EndpointRemoved: undeployed"
    assert (await sentinel.call("status", done, endpoint="count")).json()["output"] == [0]
    stream = await sentinel.call("stream", done, endpoint="count")
    assert stream.json() == {"id": done, "status": "COMPLETED", "stream": []}
    # it cannot run again: not 404, which rc2 would retry, then call the endpoint missing
    assert "not deployed any more" in refused(await sentinel.call("retry", job_id, endpoint="ping"), 409, "conflict")
    # a new call is 404: not deployed
    refused(await sentinel.call("run", body={"input": {}}, endpoint="ping"), 404, "not_found")


async def test_stream_holds_until_a_chunk_arrives(sentinel: Sentinel) -> None:
    job_id = await sentinel.run({"n": 3}, endpoint="count")
    await sentinel.take("shop.default.count")

    task = asyncio.ensure_future(sentinel.call("stream", job_id, endpoint="count"))
    await turns(task)
    sentinel.chunk("shop.default.count", job_id, 0)

    assert (await task).json() == {"id": job_id, "status": "IN_PROGRESS", "stream": [{"output": 0}]}


async def test_stream_holds_until_the_job_ends(sentinel: Sentinel) -> None:
    job_id = await sentinel.run({"n": 3}, endpoint="count")
    await sentinel.take("shop.default.count")

    task = asyncio.ensure_future(sentinel.call("stream", job_id, endpoint="count"))
    await turns(task)
    sentinel.worker_posts("shop.default.count", job_id, error_body(RuntimeError("gpu fell off")))

    # rc2 raises the error, as for a result
    assert (await task).json() == {
        "id": job_id,
        "status": "FAILED",
        "stream": [],
        "error": "RuntimeError: gpu fell off",
    }


async def test_streams_final_reply_carries_every_chunk_not_read(sentinel: Sentinel) -> None:
    job_id = await sentinel.run({"n": 4}, endpoint="count")
    await sentinel.take("shop.default.count")
    sentinel.chunk("shop.default.count", job_id, 0)
    first = (await sentinel.call("stream", job_id, endpoint="count")).json()
    for value in (1, 2, 3):
        sentinel.chunk("shop.default.count", job_id, value)
    sentinel.worker_posts("shop.default.count", job_id, {"output": [0, 1, 2, 3]})

    final = (await sentinel.call("stream", job_id, endpoint="count")).json()
    after = (await sentinel.call("stream", job_id, endpoint="count")).json()

    assert first == {"id": job_id, "status": "IN_PROGRESS", "stream": [{"output": 0}]}
    assert final == {"id": job_id, "status": "COMPLETED", "stream": [{"output": v} for v in (1, 2, 3)]}
    assert after == {"id": job_id, "status": "COMPLETED", "stream": []}


@pytest.mark.parametrize(
    ("query", "ok"), [("?wait=1", True), ("?wait=0", True), (f"?wait={STREAM_HOLD_MS + 1}", False)]
)
async def test_streams_hold_is_bounded(sentinel: Sentinel, query: str, ok: bool) -> None:
    job_id = await sentinel.run({"n": 3}, endpoint="count")

    response = await sentinel.call("stream", job_id, endpoint="count", query=query)

    if ok:  # the hold ends: an empty stream with the status now
        assert response.json() == {"id": job_id, "status": "IN_QUEUE", "stream": []}
    else:
        assert f"between 0 and {STREAM_HOLD_MS}" in refused(response, 400, "bad_request")


async def test_cancel_ends_a_running_job_and_status_says_so(sentinel: Sentinel) -> None:
    job_id = await sentinel.run()
    await sentinel.take("shop.default.add")

    cancel = (await sentinel.call("cancel", job_id)).json()
    status = (await sentinel.call("status", job_id)).json()

    # an error beside CANCELLED: rc2's result() raises it rather than return the body as the output
    assert cancel["status"] == status["status"] == "CANCELLED" and cancel["error"] == status["error"]


async def test_retry_runs_a_failed_job_again_under_its_id(sentinel: Sentinel) -> None:
    job_id = await sentinel.run()
    await sentinel.take("shop.default.add")
    sentinel.worker_posts("shop.default.add", job_id, error_body(ValueError("flaky")))
    failed = (await sentinel.call("status", job_id)).json()

    retried = await sentinel.call("retry", job_id)
    queued = (await sentinel.call("status", job_id)).json()
    assert await sentinel.take("shop.default.add") == job_id
    sentinel.worker_posts("shop.default.add", job_id, {"output": 3})
    completed = (await sentinel.call("status", job_id)).json()

    assert failed["status"] == "FAILED" and failed["error"] == "ValueError: flaky"
    assert retried.json() == {"id": job_id, "status": "IN_QUEUE"}
    assert queued["status"] == "IN_QUEUE" and "error" not in queued
    assert completed["status"] == "COMPLETED" and completed["output"] == 3


async def test_a_keyless_server_takes_only_json_declared_bodies() -> None:
    door = await open_door("node-a=NVIDIA_H200:2")
    door.plane.register(dataclasses.replace(add.spec, app="shop", app_env="default"), TARGET)
    app = create_app(door.plane, api_keys=(), intake=Intake({}), max_body_bytes=4096)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=Dispatch(app, door.plane)), base_url=BASE_URL) as c:
        sentinel = Sentinel(door, c)
        form = await sentinel.call("run", body={"input": {"a": 1, "b": 2}}, key=None, content_type="text/plain")
        job_id = await sentinel.run(key=None)
        status = await sentinel.call("status", job_id, key=None, content_type="text/plain")

    refused(form, 415, "unsupported_media_type")
    assert status.status_code == 200  # a job's verbs read no body
