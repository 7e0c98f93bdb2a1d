"""A route worker's app (worker/routeapp.py): each way a route takes its parameters, its answers and errors, /ping and
the body limit, in-process through httpx's ASGI transport; streams through a real uvicorn on loopback (the ASGI
transport holds a response until the app returns, so it cannot show a chunk arriving early)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import Header, HTTPException, UploadFile
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from flashpoint.sdk.routes import Route
from flashpoint.worker.routeapp import create_app

pytestmark = pytest.mark.timeout(30)


@asynccontextmanager
async def started(
    *routes: Route, max_body_bytes: int = 1 << 20, route_secret: str | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app serving ``routes``, after the app's startup (as uvicorn runs it)."""
    app = create_app(routes, max_body_bytes=max_body_bytes, route_secret=route_secret)
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as client:
            yield client


@asynccontextmanager
async def served(*routes: Route) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app served by uvicorn on 127.0.0.1 (a port of its own), in this event loop."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn serves: no polling for "started"
    server = uvicorn.Server(uvicorn.Config(create_app(routes), log_config=None, log_level="warning", access_log=False))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)
        sock.close()


# --- parameters ------------------------------------------------------------------------------------------------------


async def compute(numbers: list[float], scale: float = 1.0) -> dict[str, float]:
    return {"sum": sum(numbers) * scale}


def get_item(item_id: int, q: str = "", tags: list[str] | None = None) -> dict[str, Any]:
    return {"id": item_id, "q": q, "tags": tags}


def put_item(item_id: int, name: str, price: float = 0.0) -> dict[str, Any]:
    return {"id": item_id, "name": name, "price": price}


def upload(file: bytes, label: str = "") -> dict[str, Any]:
    return {"size": len(file), "label": label, "head": file[:3].decode()}


async def uploads(files: list[UploadFile], note: str) -> dict[str, Any]:
    return {"names": [f.filename for f in files], "note": note, "sizes": [len(await f.read()) for f in files]}


class Item(BaseModel):
    name: str
    price: float


def create_item(item: Item) -> dict[str, Any]:
    assert isinstance(item, Item)
    return {"name": item.name, "price": item.price}


async def test_post_takes_the_json_body_fields_as_parameters() -> None:
    async with started(("POST", "/compute", compute)) as client:
        given = await client.post("/compute", json={"numbers": [1, 2.5], "scale": 2})
        defaulted = await client.post("/compute", json={"numbers": [1, 2.5]})
        extra = await client.post("/compute", json={"numbers": [1], "unknown": True})

    assert (given.status_code, given.json()) == (200, {"sum": 7.0})
    assert defaulted.json() == {"sum": 3.5}
    assert extra.json() == {"sum": 1.0}  # fields the signature does not name are ignored (pydantic's default)


@pytest.mark.parametrize(
    ("body", "loc", "kind"),
    [
        ({"numbers": "many"}, ["body", "numbers"], "list_type"),
        ({"numbers": [1], "scale": "big"}, ["body", "scale"], "float_parsing"),
        ({}, ["body", "numbers"], "missing"),
        (None, ["body"], "missing"),
    ],
)
async def test_a_body_that_does_not_fit_the_signature_is_fastapis_422(
    body: dict[str, Any] | None, loc: list[str], kind: str
) -> None:
    async with started(("POST", "/compute", compute)) as client:
        response = await client.post("/compute", json=body) if body is not None else await client.post("/compute")

    assert response.status_code == 422
    assert [(d["loc"], d["type"]) for d in response.json()["detail"]] == [(loc, kind)]


async def test_invalid_json_is_a_422() -> None:
    async with started(("POST", "/compute", compute)) as client:
        response = await client.post("/compute", content=b"{nope", headers={"content-type": "application/json"})

    assert response.status_code == 422 and response.json()["detail"][0]["type"] == "json_invalid"


async def test_get_takes_query_parameters_and_path_parameters() -> None:
    async with started(("GET", "/items/{item_id}", get_item)) as client:
        full = await client.get("/items/5", params={"q": "red", "tags": ["a", "b"]})
        bare = await client.get("/items/6")
        bad = await client.get("/items/six")

    assert full.json() == {"id": 5, "q": "red", "tags": ["a", "b"]}  # a list is a repeated query parameter
    assert bare.json() == {"id": 6, "q": "", "tags": None}
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "item_id"]


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE", "POST"])
async def test_body_methods_take_path_parameters_beside_the_body(method: str) -> None:
    async with started((method, "/items/{item_id}", put_item)) as client:
        response = await client.request(method, "/items/3", json={"name": "lamp", "price": 9.5})
        missing = await client.request(method, "/items/3", json={"price": 9.5})

    assert response.json() == {"id": 3, "name": "lamp", "price": 9.5}
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["body", "name"]


async def test_bytes_parameters_are_multipart_uploads_and_the_rest_form_fields() -> None:
    async with started(("POST", "/upload", upload), ("POST", "/uploads", uploads)) as client:
        one = await client.post("/upload", files={"file": ("a.bin", b"abc\x00\xff")}, data={"label": "raw"})
        unlabeled = await client.post("/upload", files={"file": ("a.bin", b"xyz")})
        no_file = await client.post("/upload", data={"label": "raw"})
        several = await client.post(
            "/uploads", files=[("files", ("a.txt", b"1")), ("files", ("b.txt", b"22"))], data={"note": "two"}
        )

    assert one.json() == {"size": 5, "label": "raw", "head": "abc"}
    assert unlabeled.json() == {"size": 3, "label": "", "head": "xyz"}
    assert no_file.status_code == 422 and no_file.json()["detail"][0]["loc"] == ["body", "file"]
    assert several.json() == {"names": ["a.txt", "b.txt"], "note": "two", "sizes": [1, 2]}


async def test_a_model_parameter_is_the_body_as_fastapi_reads_it() -> None:
    async with started(("POST", "/items", create_item)) as client:
        good = await client.post("/items", json={"name": "lamp", "price": 3})
        bad = await client.post("/items", json={"name": "lamp"})

    assert good.json() == {"name": "lamp", "price": 3.0}
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "price"]


def no_parameters() -> str:
    return "pong"


def all_defaults(json: int = 1, _hidden: str = "h", model_config: str = "c") -> dict[str, Any]:
    return {"json": json, "_hidden": _hidden, "model_config": model_config}


def with_extras(a: int, **rest: Any) -> dict[str, Any]:
    return {"a": a, "rest": rest}


def positional(a: int, /, b: int = 0) -> int:
    return a * 10 + b


async def uses_fastapi(request: Request, n: int, user_agent: str = Header("none")) -> dict[str, Any]:
    return {"path": request.url.path, "n": n, "agent": user_agent}


def unresolved(x: NotDefinedAnywhere) -> Any:  # type: ignore[name-defined]  # noqa: F821
    return x


async def test_signatures_of_every_shape() -> None:
    routes: list[Route] = [
        ("POST", "/none", no_parameters),
        ("PATCH", "/defaults", all_defaults),
        ("POST", "/extras", with_extras),
        ("PUT", "/positional", positional),
        ("POST", "/fastapi", uses_fastapi),
        ("POST", "/unresolved", unresolved),
    ]
    async with started(*routes) as client:
        assert (await client.post("/none", json={"ignored": 1})).json() == "pong"
        # no body at all: the function's defaults; names pydantic keeps for itself are plain fields here
        assert (await client.patch("/defaults")).json() == {"json": 1, "_hidden": "h", "model_config": "c"}
        given = {"json": 2, "_hidden": "x", "model_config": "y"}
        assert (await client.patch("/defaults", json=given)).json() == given
        assert (await client.post("/extras", json={"a": 1, "b": [2]})).json() == {"a": 1, "rest": {"b": [2]}}
        assert (await client.put("/positional", json={"a": 4, "b": 2})).json() == 42
        answer = await client.post("/fastapi", json={"n": 5}, headers={"user-agent": "probe"})
        assert answer.json() == {"path": "/fastapi", "n": 5, "agent": "probe"}  # Request and Header left to FastAPI
        assert (await client.post("/unresolved", json={"x": [1]})).json() == [1]  # an unknown annotation: Any


def a_json_response() -> JSONResponse:
    return JSONResponse({"made": True}, status_code=201, headers={"x-made": "yes"})


def not_found(item_id: int) -> None:
    raise HTTPException(status_code=404, detail=f"no item {item_id}")


async def test_responses_and_http_errors_pass_as_they_are() -> None:
    async with started(("POST", "/make", a_json_response), ("GET", "/items/{item_id}", not_found)) as client:
        made = await client.post("/make")
        missing = await client.get("/items/7")

    assert (made.status_code, made.json(), made.headers["x-made"]) == (201, {"made": True}, "yes")
    assert (missing.status_code, missing.json()) == (404, {"detail": "no item 7"})


async def test_sync_functions_run_in_a_thread_and_async_ones_on_the_loop() -> None:
    # Given a sync route that blocks until an async route opens its gate
    loop_thread = threading.get_ident()
    gate = threading.Event()

    def blocking() -> dict[str, Any]:
        opened = gate.wait(timeout=10)
        return {"opened": opened, "on_loop": threading.get_ident() == loop_thread}

    async def opener() -> dict[str, Any]:
        gate.set()
        return {"on_loop": threading.get_ident() == loop_thread}

    async with started(("GET", "/block", blocking), ("POST", "/open", opener)) as client:
        # When both are called at once
        blocked = asyncio.create_task(client.get("/block"))
        opened = await client.post("/open")  # served while the sync one still blocks: the loop is free
        # Then the sync one ran in a thread, the async one on the loop
        assert (await asyncio.wait_for(blocked, 10)).json() == {"opened": True, "on_loop": False}
    assert opened.json() == {"on_loop": True}


# --- errors, /ping, the body limit -----------------------------------------------------------------------------------


class Broken(Exception):
    pass


def raises(message: str = "boom") -> None:
    raise Broken(message)


def not_json() -> Any:
    return object()


async def test_a_function_that_raises_is_a_500_with_its_type_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    async with started(("POST", "/fail", raises), ("GET", "/odd", not_json)) as client:
        failed = await client.post("/fail", json={"message": "the printer caught fire"})
        odd = await client.get("/odd")

    assert failed.status_code == 500
    assert failed.json() == {
        "error": f"{__name__}.Broken: the printer caught fire",
        "code": "handler_error",
        "type": f"{__name__}.Broken",
        "message": "the printer caught fire",
    }
    assert odd.status_code == 500 and odd.json()["code"] == "handler_error"
    printed = capsys.readouterr().err
    assert "POST /fail raised" in printed and "Broken: the printer caught fire" in printed
    assert "in raises\n    raise Broken(message)" in printed  # the function's own frame
    failure = printed.split("GET /odd")[0]
    assert "starlette" not in failure and "fastapi" not in failure  # from the user's code on


async def test_ping_answers_204_until_the_app_has_started_then_200() -> None:
    app = create_app([("POST", "/compute", compute)])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://worker") as client:
        before = await client.get("/ping")
        async with app.router.lifespan_context(app):
            ready = await client.get("/ping")
        after = await client.get("/ping")

    assert (before.status_code, before.content) == (204, b"")
    assert (ready.status_code, ready.json()) == (200, {"status": "healthy"})
    assert after.status_code == 204  # shut down: no traffic


SECRET_HEADER = "X-Flashpoint-Route-Secret"


async def test_only_requests_carrying_the_route_secret_are_served_and_the_route_never_sees_it() -> None:
    calls: list[list[str]] = []

    def headers(request: Request) -> list[str]:
        calls.append(list(request.headers))
        return list(request.headers)

    refused: list[httpx.Response] = []
    async with started(("POST", "/headers", headers), route_secret="s3cret-value") as client:
        for sent in (
            [],
            [(SECRET_HEADER, "wrong")],
            [(SECRET_HEADER, "s3cret-valu")],
            [(SECRET_HEADER, "s3cret-value"), (SECRET_HEADER, "wrong")],  # one copy, and the right one
        ):
            refused += [await client.post("/headers", headers=sent), await client.get("/ping", headers=sent)]
        assert calls == []  # nothing of the endpoint's ran
        served = await client.post("/headers", headers={SECRET_HEADER: "s3cret-value", "X-Other": "kept"})
        ping = await client.get("/ping", headers={SECRET_HEADER: "s3cret-value"})

    for response in refused:
        body = response.json()
        assert response.status_code == 403 and body["code"] == "forbidden"
        assert "x-flashpoint-route-secret" in body["message"] and "FLASHPOINT_ROUTE_SECRET" in body["message"]
    assert served.status_code == 200 and "x-other" in served.json()
    assert "x-flashpoint-route-secret" not in served.json() and calls == [served.json()]  # taken out before the route
    assert ping.json() == {"status": "healthy"}


async def test_a_body_over_the_limit_is_413() -> None:
    async def chunks(size: int) -> AsyncIterator[bytes]:
        for _ in range(size // 100):
            yield b" " * 100

    numbers = json.dumps({"numbers": [1] * 200}).encode()  # 605 bytes
    async with started(("POST", "/compute", compute), max_body_bytes=len(numbers)) as client:
        at_limit = await client.post("/compute", content=numbers, headers={"content-type": "application/json"})
        declared = await client.post("/compute", content=numbers + b" ", headers={"content-type": "application/json"})
        streamed = await client.post("/compute", content=chunks(1000), headers={"content-type": "application/json"})

    assert at_limit.json() == {"sum": 200.0}
    for response in (declared, streamed):  # by Content-Length, and counted while a chunked body arrives
        assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    assert "FLASHPOINT_MAX_BODY_MB" in declared.json()["message"]


async def test_only_declared_paths_are_served() -> None:
    async with started(("POST", "/compute", compute)) as client:
        slash = await client.post("/compute/", json={"numbers": [1]})
        docs = await client.get("/docs")
        method = await client.get("/compute")

    assert slash.status_code == 404  # not a redirect to the worker's own address
    assert docs.status_code == 404
    assert method.status_code == 405


def test_a_signature_fastapi_cannot_serve_names_its_route() -> None:
    def lookup(filters: list[dict[str, Any]]) -> None: ...

    with pytest.raises(TypeError, match=r"route GET /lookup \(lookup\) cannot be served"):
        create_app([("GET", "/lookup", lookup)])


# --- streams over real HTTP ------------------------------------------------------------------------------------------


async def _lines_then_open(
    client: httpx.AsyncClient, method: str, path: str, open_gate: Callable[[], None], **request: Any
) -> tuple[str, list[str], str]:
    """Read a stream's first line, then open its gate and read the rest; returns (first line, rest, content type)."""
    async with client.stream(method, path, **request) as response:
        lines = response.aiter_lines()
        first = await asyncio.wait_for(anext(lines), 10)  # arrived before the generator could end
        open_gate()
        rest = [line async for line in lines if line]
    return first, rest, response.headers["content-type"]


async def test_sync_and_async_generators_stream_json_lines_as_they_are_produced() -> None:
    sync_gate, async_gate = threading.Event(), asyncio.Event()

    def sync_items(n: int = 3) -> Iterator[dict[str, int]]:
        yield {"i": 0}
        assert sync_gate.wait(timeout=10)
        yield from ({"i": i} for i in range(1, n))

    async def async_items(n: int) -> AsyncIterator[str]:
        yield "first"
        await asyncio.wait_for(async_gate.wait(), 10)
        for i in range(1, n):
            yield f"token {i}"

    def returns_a_generator() -> Iterator[int]:
        return (i for i in range(3))  # not a generator function: what it returns streams all the same

    routes: list[Route] = [
        ("GET", "/sync", sync_items),
        ("POST", "/async", async_items),
        ("GET", "/returned", returns_a_generator),
    ]
    async with served(*routes) as client:
        sync = await _lines_then_open(client, "GET", "/sync?n=3", sync_gate.set)
        async_ = await _lines_then_open(client, "POST", "/async", async_gate.set, json={"n": 3})
        returned = (await client.get("/returned")).text

    assert sync == ('{"i":0}', ['{"i":1}', '{"i":2}'], "application/jsonl")
    assert async_ == ('"first"', ['"token 1"', '"token 2"'], "application/jsonl")
    assert returned == "0\n1\n2\n"


async def test_server_sent_events_stream_as_they_are_produced() -> None:
    gate = asyncio.Event()

    async def events(n: int) -> StreamingResponse:
        async def source() -> AsyncIterator[str]:
            yield "event: tick\ndata: 0\n\n"
            await asyncio.wait_for(gate.wait(), 10)
            for i in range(1, n):
                yield f"event: tick\ndata: {i}\n\n"

        return StreamingResponse(source(), media_type="text/event-stream")

    async with served(("POST", "/events", events)) as client:
        async with client.stream("POST", "/events", json={"n": 3}) as response:
            lines = response.aiter_lines()
            assert await asyncio.wait_for(anext(lines), 10) == "event: tick"
            assert await asyncio.wait_for(anext(lines), 10) == "data: 0"
            gate.set()
            rest = [line async for line in lines]

    assert response.headers["content-type"].startswith("text/event-stream")
    assert rest == ["", "event: tick", "data: 1", "", "event: tick", "data: 2", ""]


async def test_a_stream_that_fails_midway_is_cut_short(capsys: pytest.CaptureFixture[str]) -> None:
    async def failing() -> AsyncIterator[int]:
        yield 1
        raise Broken("midway")

    async with served(("GET", "/failing", failing)) as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get("/failing")

    assert "Broken: midway" in capsys.readouterr().err
