"""``/v1/secrets`` (api/secretroutes.py) over a real store in a tmp folder, in-process: set, list and delete with the
server's key; no answer holds a value; hostile names, apps and bodies are refused as JSON errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from flashpoint.api import errors
from flashpoint.api.secretroutes import router
from flashpoint.hosting.secretstore import SecretStore
from flashpoint.scheduler.credentials import caller_credential
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.wire.bodylimit import BodyLimit
from tests.scheduler.door import open_door

KEY = "admin-key"
VALUE = "v4lue-never-shown-0123"


@pytest_asyncio.fixture
async def plane() -> AsyncIterator[ControlPlane]:
    door = await open_door()
    yield door.plane
    await door.plane.close()


@pytest_asyncio.fixture
async def served(tmp_path: Path, plane: ControlPlane) -> AsyncIterator[tuple[httpx.AsyncClient, SecretStore]]:
    store = SecretStore(tmp_path / "secrets")
    app = FastAPI()
    errors.install(app)
    app.include_router(router, prefix="/v1")
    app.state.secrets = store
    app.state.api_keys = (KEY,)
    app.state.plane = plane  # the key check reads worker caller keys through it
    app.add_middleware(BodyLimit, max_bytes=1024 * 1024)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://server", headers=headers) as client:
        yield client, store


async def test_set_list_delete_never_answer_a_value(served: tuple[httpx.AsyncClient, SecretStore]) -> None:
    client, store = served
    answers = []
    answer = await client.put("/v1/secrets/HF_TOKEN", json={"value": VALUE})
    assert answer.status_code == 200, answer.text
    answers.append(answer.text)
    assert set(answer.json()) == {"name", "app", "created", "updated"} and answer.json()["app"] is None
    answer = await client.put("/v1/secrets/HF_TOKEN", params={"app": "shop"}, json={"value": "app-value"})
    assert answer.json()["app"] == "shop"
    assert store.resolve("HF_TOKEN") == VALUE and store.resolve("HF_TOKEN", app="shop") == "app-value"
    listed = await client.get("/v1/secrets")
    answers.append(listed.text)
    assert [(s["name"], s["app"]) for s in listed.json()["secrets"]] == [("HF_TOKEN", None), ("HF_TOKEN", "shop")]
    other = await client.get("/v1/secrets", params={"app": "other"})
    assert [(s["name"], s["app"]) for s in other.json()["secrets"]] == [("HF_TOKEN", None)]
    deleted = await client.delete("/v1/secrets/HF_TOKEN", params={"app": "shop"})
    assert deleted.status_code == 200 and store.resolve("HF_TOKEN", app="shop") == VALUE
    again = await client.delete("/v1/secrets/HF_TOKEN", params={"app": "shop"})
    assert again.status_code == 404 and again.json()["code"] == "not_found"
    assert not any(VALUE in text or "app-value" in text for text in answers)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}])
async def test_the_key_is_needed_for_every_verb(
    served: tuple[httpx.AsyncClient, SecretStore], headers: dict[str, str]
) -> None:
    client, store = served
    store.set("a", VALUE)
    for method, path in (("GET", "/v1/secrets"), ("PUT", "/v1/secrets/b"), ("DELETE", "/v1/secrets/a")):
        answer = await client.request(method, path, json={"value": "x"}, headers={"Authorization": "", **headers})
        assert answer.status_code == 401, (method, answer.text)
    assert store.resolve("a") == VALUE and store.resolve("b") is None


async def test_a_workers_caller_key_is_refused(
    served: tuple[httpx.AsyncClient, SecretStore], plane: ControlPlane
) -> None:
    client, store = served
    store.set("a", VALUE)
    caller = caller_credential(plane.worker_credential("ep", "ep-w1"), "ep", "ep-w1")
    for method, path in (("GET", "/v1/secrets"), ("PUT", "/v1/secrets/b"), ("DELETE", "/v1/secrets/a")):
        answer = await client.request(method, path, json={"value": "x"}, headers={"Authorization": f"Bearer {caller}"})
        assert answer.status_code == 403, (method, answer.text)
    assert store.resolve("a") == VALUE and store.resolve("b") is None


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/secrets/..%2F..%2Fetc%2Fpasswd", {}),
        ("/v1/secrets/a%00b", {}),
        ("/v1/secrets/RUNPOD_API_KEY", {}),
        ("/v1/secrets/" + "a" * 300, {}),
        ("/v1/secrets/ok", {"app": "../x"}),
        ("/v1/secrets/ok", {"app": ""}),
    ],
)
async def test_hostile_names_and_apps_are_400(
    served: tuple[httpx.AsyncClient, SecretStore], path: str, params: dict[str, str]
) -> None:
    client, store = served
    answer = await client.put(path, params=params, json={"value": VALUE})
    assert answer.status_code in (400, 404), answer.text
    assert answer.json()["code"] in ("bad_input", "not_found")
    assert VALUE not in answer.text
    assert not store.path.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b'"just a string"',
        b'{"value": 5}',
        b'{"value": ""}',
        b'{"value": "x", "app": "y"}',
        b'{"val": "x"}',
        b'{"value": "nul\\u0000inside"}',
        b'{"value": "\\udc80"}',
        b"[" * 200 + b"]" * 200,
        b'{"value": "\xff\xfe"}',
    ],
)
async def test_bad_bodies_are_400_and_quote_no_value(
    served: tuple[httpx.AsyncClient, SecretStore], content: bytes
) -> None:
    client, store = served
    answer = await client.put("/v1/secrets/a", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "bad_input"
    assert "inside" not in answer.text
    assert not store.path.exists()


async def test_a_body_over_the_limit_is_refused_before_the_store(served: tuple[httpx.AsyncClient, SecretStore]) -> None:
    client, store = served
    answer = await client.put("/v1/secrets/a", json={"value": "x" * (2 * 1024 * 1024)})
    assert answer.status_code == 413
    assert not store.path.exists()
