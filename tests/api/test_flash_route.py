"""Runpod Flash's client route (``POST /v2/flash/runsync`` with ``X-Flash-Endpoint``) and Flash's ``function_name`` on
Runpod's routes. The server's whole app (``Dispatch``, as ``flashpoint serve`` serves it) runs in-process over a door
plane whose workers the test plays. Flash's real client against a real server: tests/e2e/test_flash_client.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from flashpoint import Endpoint, GpuGroup
from flashpoint.access import Principal
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.flashroute import FLASH_PATH
from flashpoint.api.native import job_body
from flashpoint.api.runpod import Intake
from flashpoint.hosting.server import input_checkers
from flashpoint.jobs import JobStatus
from flashpoint.worker.handler import error_body
from tests.scheduler.door import BASE_URL, TARGET, Door, open_door

pytestmark = pytest.mark.timeout(30)

KEY = "test-key"


@Endpoint(name="route-add", gpu=GpuGroup.ANY)
async def add(a: int, b: int) -> int:
    return a + b


@Endpoint(name="route-ping")
async def ping() -> None:
    return None


@Endpoint(name="route-calc")
class Calc:
    def double(self, x: int) -> int:
        return 2 * x

    async def describe(self) -> dict[str, str]:
        return {"kind": "calc"}


@Endpoint(name="route-text")
def shout(text: str) -> str:
    return text.upper()


@Endpoint(name="route-text")
def count(items: list[Any]) -> int:
    return len(items)


@Endpoint(name="route-twins")
def left(x: int) -> str:
    return "left"


@Endpoint(name="route-twins")
def right(x: int) -> str:
    return "right"


@Endpoint(name="flash")
def flash_named(data: dict[str, Any]) -> dict[str, Any]:
    return data


HANDLES: dict[str, Any] = {h.spec.name: h for h in (add, ping, Calc, count, right, flash_named)}


@dataclass
class Served:
    door: Door
    client: httpx.AsyncClient

    async def flash(
        self, endpoint: str | None, body: Any, *, headers: Any = None, key: str | None = KEY, wait_ms: int | None = None
    ) -> httpx.Response:
        """A call as Flash's client makes it: its headers, its key as a Bearer token."""
        sent: list[tuple[str, str]] = [("X-Flash-App", "demo"), ("X-Flash-Environment", "dev")]
        if endpoint is not None:
            sent.append(("X-Flash-Endpoint", endpoint))
        if key is not None:
            sent.append(("Authorization", f"Bearer {key}"))
        query = f"?wait={wait_ms}" if wait_ms is not None else ""
        return await self.client.post(FLASH_PATH + query, json=body, headers=headers if headers is not None else sent)

    async def played(self, call: Any, endpoint: str, result: dict[str, Any]) -> tuple[httpx.Response, dict[str, Any]]:
        """Start ``call`` (a held runsync), play the endpoint's worker: take the job, post ``result``; the answer and
        the job as the worker got it."""
        task = asyncio.ensure_future(call)
        job = await self.take(endpoint, task)
        worker = self.door.worker(endpoint)
        self.door.plane.done(endpoint, worker.id, job["id"], result)
        return await task, job

    async def take(self, endpoint: str, task: asyncio.Future[Any]) -> dict[str, Any]:
        for _ in range(2000):  # turns of the loop, not time: the request reaches the plane within a few
            state = self.door.plane.endpoints[endpoint]
            if state.queued or task.done():
                break
            await asyncio.sleep(0)
        assert not task.done(), f"answered before its job was taken: {task.result().text}"
        await self.door.settle()
        worker = self.door.worker(endpoint)
        (job,) = await self.door.plane.take(endpoint, worker.id, 1, hold_s=0)
        return job


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    door = await open_door("node-a=NVIDIA_H200:2")
    for handle in HANDLES.values():
        door.plane.register(handle.spec, TARGET)  # the test plays the workers: their code is never loaded
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake(input_checkers(HANDLES)), max_body_bytes=4096)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=Dispatch(app, door.plane)), base_url=BASE_URL) as c:
        yield Served(door, c)


def refused(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["code"] == code and body["error"] == body["message"]
    return str(body["message"])


def nothing_stored(door: Door) -> bool:
    return all(not state.queued for state in door.plane.endpoints.values())


# --------------------------------------------------------------------------------------------------------------------
# Shapes


async def test_kwargs_run_and_the_answer_is_runsyncs_with_the_output(served: Served) -> None:
    response, job = await served.played(
        served.flash("route-add", {"input": {"a": 2, "b": 3}}), "route-add", {"output": 5}
    )

    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "COMPLETED" and body["output"] == 5 and body["id"] == job["id"]
    assert job["input"] == {"a": 2, "b": 3}
    # the app and environment are recorded with the job
    assert job["flashpoint"] == {"flash": {"app": "demo", "environment": "dev"}}
    assert served.door.plane.job(job["id"]).extra["flashpoint"]["flash"] == {"app": "demo", "environment": "dev"}
    assert job_body(served.door.plane, job["id"])["flash"] == {"app": "demo", "environment": "dev"}  # /v1/jobs/{id}


async def test_empty_is_not_an_argument_and_a_none_output_is_still_there(served: Served) -> None:
    call = served.flash("route-ping", {"input": {"__empty": True}})
    response, job = await served.played(call, "route-ping", {"output": None})

    assert job["input"] == {}
    # Flash's client returns the whole body as the result when "output" is missing
    assert "output" in response.json() and response.json()["output"] is None


@pytest.mark.parametrize(
    ("sent", "got"),
    [
        ({"method": "double", "x": 4}, {"method": "double", "x": 4}),
        ({"method": "describe", "__empty": True}, {"method": "describe"}),
    ],
)
async def test_a_class_method_is_named_in_method(served: Served, sent: dict[str, Any], got: dict[str, Any]) -> None:
    response, job = await served.played(served.flash("route-calc", {"input": sent}), "route-calc", {"output": "ok"})

    assert response.status_code == 200 and job["input"] == got and "target" not in job["flashpoint"]


async def test_a_failed_job_answers_failed_with_the_error_flash_raises(served: Served) -> None:
    call = served.flash("route-add", {"input": {"a": 1, "b": 2}})
    response, _ = await served.played(call, "route-add", error_body(ValueError("boom")))

    body = response.json()
    assert response.status_code == 200
    assert body["status"] == "FAILED" and body["error"] == "ValueError: boom"
    assert 'ValueError("boom")' in body["traceback"] or "ValueError: boom" in body["traceback"]


async def test_any_end_but_completed_carries_an_error(served: Served) -> None:
    task = asyncio.ensure_future(served.flash("route-add", {"input": {"a": 1, "b": 2}}))
    job = await served.take("route-add", task)
    served.door.plane.cancel(job["id"])

    body = (await task).json()
    assert body["status"] == "CANCELLED" and body["error"]  # without it Flash would return the body as the result


async def test_a_job_still_running_when_the_hold_ends_says_so_and_goes_on(served: Served) -> None:
    # nobody takes the job: the hold (1 s, the shortest) ends with it queued
    response = await served.flash("route-add", {"input": {"a": 1, "b": 2}}, wait_ms=1000)

    body = response.json()
    assert response.status_code == 200 and body["status"] == "IN_QUEUE"
    assert "still IN_QUEUE after 1 s; it goes on" in body["error"] and body["id"] in body["error"]
    assert served.door.plane.job(body["id"]).status is JobStatus.IN_QUEUE


# --------------------------------------------------------------------------------------------------------------------
# Refusals: nothing is stored


async def test_an_unknown_endpoint_is_404_which_flash_reports_as_not_deployed(served: Served) -> None:
    refused(await served.flash("nowhere", {"input": {"a": 1}}), 404, "not_found")


@pytest.mark.parametrize("key", [None, "wrong-key"])
async def test_the_servers_api_key_is_needed(served: Served, key: str | None) -> None:
    refused(await served.flash("route-add", {"input": {"a": 1, "b": 2}}, key=key), 401, "unauthorized")
    assert nothing_stored(served.door)


async def test_only_post(served: Served) -> None:
    response = await served.client.get(FLASH_PATH, headers={"X-Flash-Endpoint": "route-add"})
    refused(response, 405, "method_not_allowed")


async def test_input_that_does_not_fit_is_refused_and_logged(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="flashpoint.api")
    message = refused(await served.flash("route-add", {"input": {"a": 1}}), 400, "bad_input")

    assert "missing a required argument: 'b'" in message
    # Flash's client shows only the status of a 400: the server's log says why
    assert any("Flash call refused" in r.message and "'b'" in r.message for r in caplog.records)
    assert nothing_stored(served.door)


async def test_pickled_arguments_and_big_bodies_are_refused(served: Served) -> None:
    pickled = {"input": {"__flashpoint_pickle__": "gASVAAAAAAAAAAB9lC4="}}
    refused(await served.flash("route-add", pickled), 400, "pickle_not_allowed")
    refused(await served.flash("route-add", {"input": {"a": "x" * 5000, "b": 1}}), 413, "payload_too_large")
    assert nothing_stored(served.door)


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Flash-Endpoint", "")],
        [("X-Flash-Endpoint", "route-add/double")],
        [("X-Flash-Endpoint", "e" * 257)],
        [("X-Flash-Endpoint", "route-add"), ("X-Flash-Endpoint", "route-ping")],
        [("X-Flash-Endpoint", "route-add"), ("X-Flash-App", "a" * 129)],
        [("X-Flash-Endpoint", b"route-add\x01")],
        [("X-Flash-Endpoint", "route-add"), ("X-Flash-Environment", "d\xe9v".encode("latin-1"))],
        [("X-Flash-Endpoint", "route-add"), ("X-Flash-App", "one"), ("X-Flash-App", "two")],
    ],
    ids=["empty", "slash", "long", "twice", "long-app", "control", "non-ascii-env", "app-twice"],
)
async def test_hostile_header_values_are_refused(served: Served, headers: list[tuple[str, Any]]) -> None:
    sent = [*headers, ("Authorization", f"Bearer {KEY}")]
    refused(await served.flash(None, {"input": {"a": 1, "b": 2}}, headers=sent), 400, "bad_request")
    assert nothing_stored(served.door)


async def test_without_the_header_it_is_runpods_route_of_an_endpoint_named_flash(served: Served) -> None:
    call = served.client.post(
        f"{FLASH_PATH}?wait=5000", json={"input": {"data": {"a": 1}}}, headers={"Authorization": f"Bearer {KEY}"}
    )
    response, job = await served.played(call, "flash", {"output": {"a": 1}})

    assert response.json()["output"] == {"a": 1} and job["input"] == {"data": {"a": 1}}
    assert "flashpoint" not in job  # not a Flash call: nothing recorded


# --------------------------------------------------------------------------------------------------------------------
# Shared endpoint names


@pytest.mark.parametrize(
    ("sent", "target", "got"),
    [
        ({"text": "hi"}, "shout", {"text": "hi"}),  # the one whose signature fits
        ({"items": [1, 2]}, "count", {"items": [1, 2]}),
        ({"function_name": "shout", "text": "hi"}, "shout", {"text": "hi"}),  # Flash's dispatch key, stripped
    ],
)
async def test_a_shared_name_runs_the_function_the_input_names_or_fits(
    served: Served, sent: dict[str, Any], target: str, got: dict[str, Any]
) -> None:
    response, job = await served.played(served.flash("route-text", {"input": sent}), "route-text", {"output": 1})

    assert response.status_code == 200
    assert job["flashpoint"]["target"] == target and job["input"] == got


@pytest.mark.parametrize(
    ("endpoint", "sent", "says"),
    [
        ("route-text", {"nope": 1}, "fits none of them"),
        ("route-twins", {"x": 1}, "the input fits left, right"),
        ("route-text", {"function_name": "gone", "text": "x"}, "serves no function or class named 'gone'"),
        ("route-text", {"function_name": 3, "text": "x"}, '"function_name" must name a function'),
    ],
)
async def test_a_shared_name_that_cannot_choose_is_refused_listing_its_functions(
    served: Served, endpoint: str, sent: dict[str, Any], says: str
) -> None:
    message = refused(await served.flash(endpoint, {"input": sent}), 400, "bad_input")

    assert says in message
    assert nothing_stored(served.door)


async def test_runpods_routes_take_function_name_on_a_shared_name_only(served: Served) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    shared = await served.client.post(
        "/v2/route-text/run", json={"input": {"function_name": "count", "items": []}}, headers=auth
    )
    lone = await served.client.post(
        "/v2/route-add/run", json={"input": {"function_name": "add", "a": 1, "b": 2}}, headers=auth
    )
    named = await served.client.post(
        "/v2/route-text/run",
        json={"input": {"function_name": "count", "text": "x"}, "flashpoint": {"target": "shout"}},
        headers=auth,
    )

    assert shared.status_code == 200
    job = served.door.plane.job(shared.json()["id"])
    assert job.extra["flashpoint"] == {"target": "count"} and job.input == {"items": []}
    # one function: function_name is an argument like any other (add has none of that name)
    assert "function_name" in refused(lone, 400, "bad_input")
    # flashpoint's own target wins, and function_name is then an argument (shout has none of that name)
    assert "function_name" in refused(named, 400, "bad_input")


# --------------------------------------------------------------------------------------------------------------------
# Apps (decision 0104): the headers name an app's endpoint, among those the key sees

#: a scoped key limited to app lab (``principal_lookup``'s answer for it)
LAB_KEY = "fpk_lab"


@pytest.fixture
async def apps() -> AsyncIterator[Served]:
    """``route-add`` and ``route-twins`` deployed as app shop (production) and app lab (staging), ``route-calc`` in
    shop only, beside the served ``route-add`` and ``route-ping`` of no app; ``LAB_KEY`` is an invoke key limited to
    lab."""
    door = await open_door("node-a=NVIDIA_H200:2")
    for handle in (add, ping):
        door.plane.register(handle.spec, TARGET)
    for app, env in (("shop", "production"), ("lab", "staging")):
        for spec in (add.spec, right.spec):
            door.plane.register(dataclasses.replace(spec, app=app, app_env=env), TARGET)
    door.plane.register(dataclasses.replace(Calc.spec, app="shop", app_env="production"), TARGET)
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake(input_checkers(HANDLES)), max_body_bytes=4096)
    app.state.key_lookup = lambda token: Principal("lab-ci", "invoke", "lab", None) if token == LAB_KEY else None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=Dispatch(app, door.plane)), base_url=BASE_URL) as c:
        yield Served(door, c)


def flash_headers(app: str, env: str | None, endpoint: str = "route-add", key: str = KEY) -> list[tuple[str, str]]:
    sent = [("X-Flash-App", app), ("X-Flash-Endpoint", endpoint), ("Authorization", f"Bearer {key}")]
    return sent + ([("X-Flash-Environment", env)] if env is not None else [])


@pytest.mark.parametrize(
    ("app", "env", "key", "endpoint"),
    [
        ("shop", "production", KEY, "shop.production.route-add"),
        ("lab", "staging", KEY, "lab.staging.route-add"),
        ("shop", None, KEY, "shop.production.route-add"),  # no environment header: Flash's default
        ("lab", "staging", LAB_KEY, "lab.staging.route-add"),
        # an app not deployed (Flash's default, the folder's name): the one endpoint of the name
        ("ghost", "production", KEY, "route-add"),
        ("ghost", "production", KEY, "shop.production.route-calc"),
    ],
)
async def test_the_headers_name_an_apps_endpoint(
    apps: Served, app: str, env: str | None, key: str, endpoint: str
) -> None:
    name = endpoint.rpartition(".")[2]
    call = apps.flash(None, {"input": {"a": 1, "b": 2}}, headers=flash_headers(app, env, name, key))
    response, job = await apps.played(call, endpoint, {"output": 3})

    assert response.status_code == 200, response.text
    assert response.json()["output"] == 3 and apps.door.plane.job(job["id"]).endpoint == endpoint


@pytest.mark.parametrize(
    ("app", "env", "endpoint", "key", "says"),
    [
        ("lab", "production", "route-add", KEY, "app 'lab' has no environment 'production'"),
        ("lab", None, "route-add", KEY, "app 'lab' has no environment 'production'"),
        ("ghost", "production", "route-embed", KEY, "app 'ghost' is not deployed; deploy it first with 'flashpoint"),
        ("shop", "production", "route-add", LAB_KEY, "app 'shop' is not deployed; deploy it first with 'flashpoint"),
        ("lab", "staging", "route-embed", KEY, "no endpoint named 'lab.staging.route-embed'"),
        (
            "ghost",
            "production",
            "route-twins",
            KEY,
            "app 'ghost' is not deployed; deploy it first with 'flashpoint deploy'; 'route-twins' is deployed as "
            "lab.staging.route-twins, shop.production.route-twins",
        ),
        (
            "ghost",
            "production",
            "route-twins",
            LAB_KEY,
            "app 'ghost' is not deployed; deploy it first with 'flashpoint",
        ),
    ],
)
async def test_what_is_not_deployed_or_not_seen_is_404(
    apps: Served, app: str, env: str | None, endpoint: str, key: str, says: str
) -> None:
    response = await apps.flash(None, {"input": {"a": 1, "b": 2}}, headers=flash_headers(app, env, endpoint, key))

    assert refused(response, 404, "not_found").startswith(says)
    assert nothing_stored(apps.door)
