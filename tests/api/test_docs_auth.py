"""FastAPI's own routes (/openapi.json, /docs, /redoc) need the API key like every other route when keys are set.

The server's app (``create_app`` behind ``Dispatch``, as ``flashpoint serve`` serves it) is driven in-process over a
door plane; the embedded plane, whose app is built inside it, is asked over real HTTP.

Covers ``flashpoint.api.deps`` (the API key check) for tests/test_layout.py.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.runpod import Intake
from flashpoint.hosting.embedded import EmbeddedServer
from tests.scheduler.door import BASE_URL, open_door

DOCS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
KEY = "test-key"


async def server_client(api_keys: tuple[str, ...]) -> httpx.AsyncClient:
    """A client of the server's whole app, with these keys, over a door plane (in-process)."""
    door = await open_door()
    app = Dispatch(create_app(door.plane, api_keys=api_keys, intake=Intake({})), door.plane)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


async def test_docs_and_the_schema_need_the_key_when_keys_are_set() -> None:
    async with await server_client((KEY,)) as client:
        for path in DOCS:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                denied = await client.get(path, headers=headers)
                assert denied.status_code == 401, path
                body = denied.json()
                assert body["code"] == "unauthorized" and body["error"], path
                assert denied.headers["WWW-Authenticate"] == "Bearer", path
            assert (await client.get(path, headers={"Authorization": f"Bearer {KEY}"})).status_code == 200, path
            assert (await client.get(path, headers={"Authorization": KEY})).status_code == 200, path
        schema = (await client.get("/openapi.json", headers={"Authorization": f"Bearer {KEY}"})).json()
    assert "/v1/fleet" in schema["paths"]


async def test_docs_stay_open_on_a_server_without_keys() -> None:
    async with await server_client(()) as client:
        for path in DOCS:
            assert (await client.get(path)).status_code == 200, path
        assert "/v1/fleet" in (await client.get("/openapi.json")).json()["paths"]


async def test_the_embedded_planes_schema_needs_its_key(make_embedded: Callable[..., EmbeddedServer]) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    async with httpx.AsyncClient(base_url=embedded.url, trust_env=False, timeout=30) as client:
        denied = await client.get("/v1/openapi.json")
        allowed = await client.get("/v1/openapi.json", headers={"Authorization": f"Bearer {embedded.api_key}"})
    assert denied.status_code == 401 and denied.json()["code"] == "unauthorized"
    assert allowed.status_code == 200 and "/fleet" in allowed.json()["paths"]
