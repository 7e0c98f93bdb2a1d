"""FastAPI's own routes (/openapi.json, /docs, /redoc) need the API key like every other route when keys are set."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from flashpoint.embedded import EmbeddedServer
from tests.conftest import Served

DOCS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_docs_and_the_schema_need_the_key_when_keys_are_set(serve: Callable[..., Served]) -> None:
    served = serve()
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for path in DOCS:
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                denied = client.get(path, headers=headers)
                assert denied.status_code == 401, path
                body = denied.json()
                assert body["code"] == "unauthorized" and body["error"], path
            assert client.get(path, headers=served.headers).status_code == 200, path
        schema = client.get("/openapi.json", headers=served.headers).json()
    assert "/v1/fleet" in schema["paths"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_docs_stay_open_on_a_loopback_server_without_keys(serve: Callable[..., Served]) -> None:
    served = serve(key="")
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for path in DOCS:
            assert client.get(path).status_code == 200, path
        assert "/v1/fleet" in client.get("/openapi.json").json()["paths"]


async def test_the_embedded_planes_schema_needs_its_key(make_embedded: Callable[..., EmbeddedServer]) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    async with httpx.AsyncClient(base_url=embedded.url, trust_env=False, timeout=30) as client:
        denied = await client.get("/v1/openapi.json")
        allowed = await client.get("/v1/openapi.json", headers={"Authorization": f"Bearer {embedded.api_key}"})
    assert denied.status_code == 401 and denied.json()["code"] == "unauthorized"
    assert allowed.status_code == 200 and "/fleet" in allowed.json()["paths"]
