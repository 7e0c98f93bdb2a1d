"""The route proxy in-process: the server's ``Dispatch`` over a door plane, served by uvicorn on 127.0.0.1, forwarding
to a real worker app on 127.0.0.1 (the stand-in Runpod load-balanced worker, or raw servers that misbehave). The door's
stub backend points route workers at those addresses and says when their ``/ping`` answers 200."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn

from flashpoint import GpuType
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.runpod import Intake
from flashpoint.api.transport import CoalescingHttpToolsProtocol
from flashpoint.scheduler.credentials import route_credential
from flashpoint.spec import RouteSpec
from tests.apps import route_stub_worker
from tests.conftest import eventually
from tests.scheduler.door import Door, open_door, until

KEY = "proxy-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: one event loop for the module: the servers outlive each test
pytestmark = pytest.mark.asyncio(loop_scope="module")
ROUTES = (
    RouteSpec("GET", "/echo", "echo"),
    RouteSpec("POST", "/items/{item_id}", "item"),
    RouteSpec("GET", "/files/{rest:path}", "files"),
)


@contextlib.asynccontextmanager
async def serving(app: Any, protocol: Any = "httptools") -> AsyncIterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 (a free port) in this loop; its address."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # proxy_headers off, as the servers run: uvicorn would otherwise take a loopback client's X-Forwarded-For as its
    # address
    config = uvicorn.Config(
        app, http=protocol, log_level="critical", lifespan="off", timeout_graceful_shutdown=0.1, proxy_headers=False
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done(), 10, "uvicorn to start")
        assert not task.done()
        host, port = sock.getsockname()
        yield f"{host}:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@contextlib.asynccontextmanager
async def raw_worker(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A worker that speaks raw bytes (to misbehave): ``answer`` gets each connection."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError):
            await answer(reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


@dataclasses.dataclass
class Rig:
    door: Door
    url: str
    client: httpx.AsyncClient
    dispatch: Dispatch

    def endpoint(self, name: str = "api", **options: Any) -> None:
        options.setdefault("gpu", GpuType.NVIDIA_H200)
        self.door.routes_endpoint(ROUTES, name=name, **options)

    async def warm(self, name: str = "api", address: str | None = None, **options: Any) -> None:
        """A route endpoint with one ready worker (at ``address``: else the stand-in worker)."""
        if address is not None:
            self.door.backend.http_addresses.append(address)
        self.endpoint(name, workers=(1, 1), **options)
        await self.door.settle()
        await self.door.ready(self.door.worker(name))


class Switch:
    """The proxy server's app: each test's own ``Dispatch`` (the servers outlive the tests; starting and stopping
    uvicorn for each took a third of a second)."""

    app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def servers() -> AsyncIterator[tuple[str, str, Switch]]:
    """The stand-in worker and the proxy, served on 127.0.0.1 for the whole module: (worker, proxy, switch)."""
    route_stub_worker.READY.set()
    switch = Switch()
    async with serving(route_stub_worker.app) as worker, serving(switch, CoalescingHttpToolsProtocol) as proxy:
        yield worker, proxy, switch


@pytest_asyncio.fixture(loop_scope="module")
async def rig(servers: tuple[str, str, Switch]) -> AsyncIterator[Rig]:
    worker, proxy, switch = servers
    door = await open_door("node-a=NVIDIA_H200:2")
    app = create_app(door.plane, api_keys=(KEY,), intake=Intake({}), max_body_bytes=1024, route_wait_s=0.3)
    switch.app = dispatch = Dispatch(app, door.plane)
    door.backend.http_address = worker
    async with httpx.AsyncClient(base_url=f"http://{proxy}", timeout=20) as client:
        yield Rig(door, f"http://{proxy}", client, dispatch)
    await dispatch.routes.close()
    await door.plane.close()


def seen(response: httpx.Response) -> dict[str, Any]:
    """What the stand-in worker received, as it echoed it."""
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    body["headers"] = [(name, value) for name, value in body["headers"]]
    return body


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE"])
async def test_each_method_goes_to_the_worker_with_its_path_query_body_and_headers(rig: Rig, method: str) -> None:
    await rig.warm()
    content = b'{"price": 3}' if method != "GET" else None
    response = await rig.client.request(
        method,
        "/api/items/7?q=1&x=%2F",
        content=content,
        headers={**AUTH, "X-Custom": "kept", "Content-Type": "application/json", "Connection": "keep-alive"},
    )
    got = seen(response)
    assert (got["method"], got["path"], got["query"]) == (method, "/items/7", "q=1&x=%2F")
    assert got["body"] == (content or b"").decode() and got["pathParams"] == {"item_id": "7"}
    names = {name for name, _ in got["headers"]}
    assert "authorization" not in names and "connection" not in names  # the server's key, a hop-by-hop header
    headers = dict(got["headers"])
    assert headers["x-custom"] == "kept" and headers["content-type"] == "application/json"
    assert headers["x-forwarded-for"] == "127.0.0.1" and headers["x-forwarded-prefix"] == "/api"
    assert headers["x-forwarded-host"] == rig.url.removeprefix("http://")
    assert headers["host"] == rig.door.worker("api").address  # the worker's own address
    assert "user-agent" in names and "accept-encoding" in names  # httpx's, passed on; none added by the proxy
    assert rig.door.plane.endpoint("api").in_flight == 0


async def test_the_worker_gets_its_route_secret_and_only_the_proxys_forwarding_headers(rig: Rig) -> None:
    await rig.warm()
    claims = [
        ("X-Forwarded-For", "203.0.113.9"),
        ("X-Forwarded-Host", "attacker.example"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Prefix", "/admin"),
        ("X-Forwarded-Port", "443"),
        ("X-Forwarded-Anything", "x"),
        ("Forwarded", "for=203.0.113.9;host=attacker.example"),
        ("X-Flashpoint-Route-Secret", "forged"),
    ]
    got = seen(await rig.client.get("/api/echo", headers=[*AUTH.items(), *claims]))
    sent = [(name, value) for name, value in got["headers"] if name.startswith("x-forwarded-") or name == "forwarded"]
    proxy = rig.url.removeprefix("http://")
    assert sorted(sent) == [
        ("x-forwarded-for", "127.0.0.1"),
        ("x-forwarded-host", proxy),
        ("x-forwarded-prefix", "/api"),
        ("x-forwarded-proto", "http"),
    ]
    worker = rig.door.worker("api")
    secret = route_credential(rig.door.plane.worker_credential("api", worker.id), "api", worker.id)
    assert [value for name, value in got["headers"] if name == "x-flashpoint-route-secret"] == [secret]
    assert secret != rig.door.plane.worker_credential("api", worker.id)  # not the worker's pull key


async def test_an_endless_answer_head_is_502_and_its_connection_closed(rig: Rig) -> None:
    wrote = 0
    cut = asyncio.Event()

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal wrote
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        line = b"x-filler: " + b"a" * 1014 + b"\r\n"
        try:
            while wrote < 256 * 2**20:  # bounded: a proxy that reads on fails the test, not the machine
                writer.write(line)
                wrote += len(line)
                await writer.drain()
        except ConnectionError:
            cut.set()  # the proxy closed the connection while the head went on

    async with raw_worker(endless) as address:
        await rig.warm(address=address)
        response = await asyncio.wait_for(rig.client.get("/api/echo", headers=AUTH), 30)
        body = response.json()
        assert response.status_code == 502 and body["code"] == "bad_worker_answer"
        assert "head passed 64 KiB" in body["message"]
        await asyncio.wait_for(cut.wait(), 30)
    # what the worker got written: the proxy's 64 KiB and what the two sockets' kernel buffers held, far below the
    # bound the writer stops at
    assert wrote < 32 * 2**20
    assert rig.door.plane.endpoint("api").in_flight == 0


async def test_paths_keep_their_encoding_and_the_endpoint_alone_is_its_root(rig: Rig) -> None:
    await rig.warm()
    got = seen(await rig.client.get("/api/raw/a%20b/c%2Fd", headers=AUTH))
    assert (got["rawPath"], got["path"]) == ("/raw/a%20b/c%2Fd", "/raw/a b/c/d")
    root = await rig.client.get("/api", headers=AUTH)
    assert (root.status_code, root.text) == (404, "Not Found")  # the worker's own answer for "/"


async def test_the_server_key_is_required(rig: Rig) -> None:
    await rig.warm()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": ""}):
        response = await rig.client.get("/api/echo", headers=headers)
        assert response.status_code == 401 and response.json()["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert seen(await rig.client.get("/api/echo", headers={"Authorization": KEY}))["method"] == "GET"  # raw key too


async def test_bodies_over_the_limit_are_refused_before_anything_is_forwarded(rig: Rig) -> None:
    rig.endpoint()  # no worker: nothing may start for a refused request either

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b"x" * 400  # no Content-Length: refused while it streams in

    for content in (b"x" * 1025, chunks()):
        response = await rig.client.post("/api/items/1", content=content, headers=AUTH)
        assert response.status_code == 413 and response.json()["code"] == "payload_too_large"
    await rig.door.settle()
    assert rig.door.backend.started == [] and rig.door.plane.endpoint("api").queued == 0


async def test_a_stream_arrives_chunk_by_chunk(rig: Rig) -> None:
    await rig.warm()
    async with rig.client.stream("GET", "/api/stream?id=chunks", headers=AUTH) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in response.headers
        chunks = response.aiter_raw()
        first = await asyncio.wait_for(chunks.__anext__(), 10)  # the worker holds the rest back until released
        assert first == b"data: first\n\n"
        released = await rig.client.post("/api/release/chunks", headers=AUTH)
        assert released.status_code == 200
        rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"data: second\n\ndata: third\n\n"
    assert rig.door.plane.endpoint("api").in_flight == 0


async def test_a_client_that_hangs_up_mid_stream_ends_the_exchange(rig: Rig) -> None:
    await rig.warm()
    async with rig.client.stream("GET", "/api/stream?id=abandoned", headers=AUTH) as response:
        await response.aiter_raw().__anext__()
        assert rig.door.plane.endpoint("api").in_flight == 1
    # the client closed its connection: the proxy stops pumping and hands the worker back
    await eventually(lambda: rig.door.plane.endpoint("api").in_flight == 0, 10, "the request to end")


async def test_statuses_and_headers_come_back_as_the_worker_sent_them(rig: Rig) -> None:
    await rig.warm()
    head = await rig.client.head("/api/echo", headers=AUTH)
    assert head.status_code == 200 and head.content == b"" and int(head.headers["content-length"]) > 0
    response = await rig.client.post("/api/status/418", headers=AUTH)
    assert response.status_code == 418 and response.json() == {"status": 418}
    assert response.headers.get_list("server") == ["uvicorn"] and len(response.headers.get_list("date")) == 1


async def test_hop_by_hop_answer_headers_stay_with_the_worker_and_the_client_keeps_its_connection(rig: Rig) -> None:
    heads: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            heads.append(head.lower())
            writer.write(
                b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                b"X-Mine: yes\r\nSet-Cookie: s=1\r\n\r\nok"
            )
            await writer.drain()

    async with raw_worker(answer) as address:
        await rig.warm(address=address)
        for _ in range(2):
            response = await rig.client.get("/api/anything", headers=AUTH)
            assert (response.status_code, response.text, response.headers["x-mine"]) == (201, "ok", "yes")
            assert "keep-alive" not in response.headers and response.headers.get("connection") != "close"
            assert response.headers["set-cookie"] == "s=1"  # the client's cookie
            rig.client.cookies.clear()
        # and the proxy kept none: the next request carried no cookie to the worker, on the same connection
        assert len(heads) == 2 and not any(b"\r\ncookie:" in head for head in heads)


async def test_a_request_waits_for_a_worker_to_be_ready_scale_from_zero(rig: Rig) -> None:
    rig.endpoint()
    rig.dispatch.routes.wait_s = 30
    request = asyncio.ensure_future(rig.client.get("/api/echo", headers=AUTH))
    await eventually(lambda: rig.door.backend.started, 10, "a worker to start")
    assert not request.done()
    await rig.door.ready(rig.door.worker("api"))
    assert seen(await request)["path"] == "/echo"


async def test_no_worker_ready_within_the_wait_is_503_with_the_explanation(rig: Rig) -> None:
    rig.door.endpoint(name="hog", gpu=GpuType.NVIDIA_H200, workers=(2, 2))  # every device, for good
    rig.endpoint()
    response = await rig.client.get("/api/echo", headers=AUTH)
    body = response.json()
    assert response.status_code == 503 and body["code"] == "no_worker"
    assert "within 0.3s" in body["message"]
    explanation = body["explanation"]
    assert explanation["queueDepth"] == 1 and explanation["never"] is False
    assert {r["code"] for r in explanation["reasons"]} == {"busy"} and explanation["reasons"][0]["holders"] == ["hog"]
    assert rig.door.plane.endpoint("api").queued == 0


async def test_an_endpoint_that_can_never_run_is_503_at_once(rig: Rig) -> None:
    rig.endpoint(gpu=GpuType.NVIDIA_B200)
    rig.dispatch.routes.wait_s = 60
    response = await asyncio.wait_for(rig.client.get("/api/echo", headers=AUTH), 10)
    body = response.json()
    assert response.status_code == 503 and body["code"] == "no_worker" and body["explanation"]["never"] is True
    assert "can never run on this fleet" in body["message"]


async def test_a_client_that_hangs_up_while_held_is_counted_out(rig: Rig) -> None:
    rig.door.endpoint(name="hog", gpu=GpuType.NVIDIA_H200, workers=(2, 2))
    rig.endpoint()
    rig.dispatch.routes.wait_s = 60
    host, port = rig.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET /api/echo HTTP/1.1\r\nhost: x\r\nauthorization: {KEY}\r\n\r\n".encode())
    ep = rig.door.plane.endpoint("api")
    await eventually(lambda: ep.queued == 1, 10, "the request to be held")
    writer.close()
    await eventually(lambda: ep.queued == 0, 10, "the held request to be counted out")


async def test_a_worker_that_is_gone_or_drops_the_request_is_502(rig: Rig) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    gone = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there any more
    await rig.warm(address=gone)
    response = await rig.client.get("/api/echo", headers=AUTH)
    assert response.status_code == 502 and response.json()["code"] == "worker_lost"

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()  # a worker killed while the request was in flight: reset, no answer

    async with raw_worker(hang_up) as address:
        await rig.warm("other", address=address)
        response = await rig.client.get("/other/echo", headers=AUTH)
        assert response.status_code == 502 and response.json()["code"] == "worker_lost"
        assert rig.door.plane.endpoint("other").in_flight == 0


async def test_a_worker_lost_mid_answer_closes_the_clients_connection(rig: Rig) -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await writer.drain()
        writer.transport.abort()

    async with raw_worker(half) as address:
        await rig.warm(address=address)
        async with rig.client.stream("GET", "/api/echo", headers=AUTH) as response:
            assert response.status_code == 200
            with pytest.raises(httpx.RemoteProtocolError):
                await response.aread()
    assert rig.door.plane.endpoint("api").in_flight == 0


async def test_a_worker_past_the_read_deadline_is_504(rig: Rig) -> None:
    await rig.warm(execution_timeout_ms=200)
    response = await rig.client.get("/api/slow?seconds=5", headers=AUTH)
    assert response.status_code == 504 and response.json()["code"] == "worker_timeout"


async def test_other_paths_are_the_servers_own(rig: Rig) -> None:
    await rig.warm()
    assert (await rig.client.get("/v1/endpoints", headers=AUTH)).json()["endpoints"][0]["kind"] == "routes"
    missing = await rig.client.get("/nothing/here", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert (await rig.client.post("/v2/api/run", json={"input": {}}, headers=AUTH)).json()["code"] == (
        "not_a_queue_endpoint"
    )


async def test_route_metrics_count_requests_by_template_and_status_and_show_requests_in_flight(rig: Rig) -> None:
    await rig.warm()
    await rig.client.post("/api/items/1", headers=AUTH)
    await rig.client.post("/api/items/2", headers=AUTH)
    await rig.client.get("/api/echo", headers=AUTH)
    await rig.client.delete("/api/status/404", headers=AUTH)
    text = (await rig.client.get("/metrics", headers=AUTH)).text
    items = 'endpoint="api",method="POST",route="/items/{item_id}"'
    assert f'flashpoint_route_requests_total{{{items},status="200"}} 2.0' in text
    assert 'flashpoint_route_requests_total{endpoint="api",method="GET",route="/echo",status="200"} 1.0' in text
    assert 'flashpoint_route_requests_total{endpoint="api",method="DELETE",route="other",status="404"} 1.0' in text
    assert 'flashpoint_route_request_seconds_count{endpoint="api",method="POST",route="/items/{item_id}"} 2.0' in text
    assert 'flashpoint_route_requests_in_flight{endpoint="api"} 0.0' in text
    assert 'flashpoint_route_requests_held{endpoint="api"} 0.0' in text
    assert 'flashpoint_jobs{endpoint="api"' not in text  # a route endpoint has no jobs
    assert 'flashpoint_workers{endpoint="api",state="IDLE"} 1.0' in text


async def test_the_embedded_server_serves_route_endpoints_with_its_key() -> None:
    from flashpoint.hosting.embedded import _LazyRoutes

    door = await open_door()
    calls: list[str] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = _LazyRoutes(inner, door.plane, "embedded-key", wait_s=0.1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://plane") as client:
        assert (await client.get("/api/echo")).status_code == 204  # no route endpoint yet: the inner app's
        door.routes_endpoint(name="api", gpu=GpuType.NVIDIA_B200)
        assert (await client.get("/api/echo")).status_code == 401
        refused = await client.get("/api/echo", headers={"Authorization": "Bearer embedded-key"})
        assert refused.status_code == 503 and refused.json()["explanation"]["never"] is True
        assert (await client.get("/v1/fleet")).status_code == 204
    assert calls == ["/api/echo", "/v1/fleet"]
    await app.close()
    await until(lambda: True)
