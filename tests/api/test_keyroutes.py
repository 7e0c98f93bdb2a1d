"""``/v1/keys`` (api/keyroutes.py) mounted on the native app (``api.app.create_app``) as ``flashpoint serve`` mounts
the secrets, served by uvicorn on 127.0.0.1: create, list and revoke with the server's key; a token is in the answer
that creates it and in no other answer, list or error; bad bodies are 400 saying what to send; the OpenAPI document
lists every error answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import uvicorn

from flashpoint.api.app import create_app
from flashpoint.api.keyroutes import router
from flashpoint.api.runpod import Intake
from flashpoint.hosting.keystore import KeyStore
from flashpoint.scheduler.credentials import caller_credential
from flashpoint.scheduler.loop import ControlPlane
from tests.scheduler.door import open_door

KEY = "server-admin-key"


@dataclass
class Served:
    client: httpx.AsyncClient
    store: KeyStore
    plane: ControlPlane


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    door = await open_door()
    store = KeyStore(tmp_path / "data" / "keys")
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}), max_body_bytes=64 * 1024)
    app.include_router(router, prefix="/v1")
    app.state.keys = store
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:  # uvicorn's own flag, set once it listens; the loop turns meanwhile
        assert not task.done(), task
        await asyncio.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield Served(client, store, door.plane)
    server.should_exit = True
    await task
    sock.close()
    await door.plane.close()


async def test_create_list_revoke_and_the_token_is_shown_once(served: Served) -> None:
    client, store = served.client, served.store
    said: list[str] = []
    made = await client.post("/v1/keys", json={"name": "ci", "scope": "deploy", "app": "shop", "env": "prod"})
    assert made.status_code == 200, made.text
    body = made.json()
    token = body["key"]
    assert set(body) == {"key", "name", "scope", "app", "env", "created", "created_by"}
    assert (body["name"], body["scope"], body["app"], body["env"], body["created_by"]) == (
        "ci", "deploy", "shop", "prod", "server"
    )  # fmt: skip
    assert store.lookup(token) is not None and store.lookup(token).name == "ci"  # type: ignore[union-attr]
    admin = await client.post("/v1/keys", json={"name": "ops", "scope": "admin"})
    assert admin.status_code == 200 and admin.json()["app"] is None

    listed = await client.get("/v1/keys")
    said.append(listed.text)
    assert listed.status_code == 200
    assert [(k["name"], k["scope"], k["app"], k["env"]) for k in listed.json()["keys"]] == [
        ("ci", "deploy", "shop", "prod"),
        ("ops", "admin", None, None),
    ]
    assert all(set(k) == {"name", "scope", "app", "env", "created", "created_by"} for k in listed.json()["keys"])

    again = await client.post("/v1/keys", json={"name": "ci", "scope": "invoke"})
    said.append(again.text)
    assert again.status_code == 409 and again.json()["code"] == "conflict" and "revoke it first" in again.text

    revoked = await client.delete("/v1/keys/ci")
    said.append(revoked.text)
    assert revoked.status_code == 200 and revoked.json() == {"revoked": "ci"}
    assert store.lookup(token) is None
    gone = await client.delete("/v1/keys/ci")
    said.append(gone.text)
    assert gone.status_code == 404 and gone.json()["code"] == "not_found"
    hashes = store.path.read_text()
    assert not any(token in text or admin.json()["key"] in text for text in said)
    assert not any(hashes.split('"sha256": "')[1][:64] in text for text in said)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "send {"),
        (b"not json", "send {"),
        (b'"ci"', "nothing else"),
        (b"[]", "nothing else"),
        (b'{"name": "ci"}', "nothing else"),
        (b'{"scope": "invoke"}', "nothing else"),
        (b'{"name": "ci", "scope": "invoke", "extra": 1}', "nothing else"),
        (b'{"name": 5, "scope": "invoke"}', "every value a string"),
        (b'{"name": "ci", "scope": "invoke", "app": 7}', "every value a string"),
        (b'{"name": "ci", "scope": "root"}', "scope is one of admin, deploy, invoke"),
        (b'{"name": "../etc", "scope": "invoke"}', "key's name is letters"),
        (b'{"name": "ci", "scope": "invoke", "env": "prod"}', "name the app too"),
        (b'{"name": "ci", "scope": "admin", "app": "shop"}', "whole server"),
        (b'{"name": "ci", "scope": "invoke", "app": "a/b"}', "app's name"),
        (b"[" * 200 + b"]" * 200, "send {"),
        (b'{"name": "\xff", "scope": "invoke"}', "send {"),
    ],
)
async def test_bad_bodies_are_400_saying_what_to_send(served: Served, content: bytes, says: str) -> None:
    answer = await served.client.post("/v1/keys", content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "bad_input" and says in answer.json()["message"]
    assert not served.store.path.exists()


async def test_a_body_over_the_limit_is_refused_before_the_store(served: Served) -> None:
    answer = await served.client.post("/v1/keys", json={"name": "a" * (128 * 1024), "scope": "invoke"})
    assert answer.status_code == 413
    assert not served.store.path.exists()


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}])
async def test_the_servers_key_is_needed_for_every_verb(served: Served, headers: dict[str, str]) -> None:
    _, token = served.store.create("kept", scope="admin", by="test")
    for method, path in (("GET", "/v1/keys"), ("POST", "/v1/keys"), ("DELETE", "/v1/keys/kept")):
        answer = await served.client.request(
            method, path, json={"name": "new", "scope": "admin"}, headers={"Authorization": "", **headers}
        )
        assert answer.status_code == 401, (method, answer.text)
        assert token not in answer.text
    assert [i.name for i in served.store.list()] == ["kept"]


async def test_a_workers_caller_key_is_refused(served: Served) -> None:
    served.store.create("kept", scope="admin", by="test")
    caller = caller_credential(served.plane.worker_credential("ep", "ep-w1"), "ep", "ep-w1")
    for method, path in (("GET", "/v1/keys"), ("POST", "/v1/keys"), ("DELETE", "/v1/keys/kept")):
        answer = await served.client.request(
            method, path, json={"name": "new", "scope": "admin"}, headers={"Authorization": f"Bearer {caller}"}
        )
        assert answer.status_code == 403, (method, answer.text)
    assert [i.name for i in served.store.list()] == ["kept"]


@pytest.mark.parametrize("name", ["..%2F..%2Fetc", "a%00b", "a" * 300, "%FF"])
async def test_revoking_a_hostile_name_is_404(served: Served, name: str) -> None:
    served.store.create("kept", scope="invoke", by="test")
    answer = await served.client.delete(f"/v1/keys/{name}")
    assert answer.status_code == 404 and answer.json()["code"] == "not_found"
    assert [i.name for i in served.store.list()] == ["kept"]


async def test_the_openapi_document_lists_the_error_answers(served: Served) -> None:
    paths = (await served.client.get("/openapi.json")).json()["paths"]
    for path, method in (("/v1/keys", "post"), ("/v1/keys", "get"), ("/v1/keys/{name}", "delete")):
        assert {"400", "401", "403", "404", "409", "413"} <= set(paths[path][method]["responses"]), (path, method)
