"""One write per response: the coalescing transport under uvicorn's httptools protocol."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from flashpoint.api.transport import (
    CoalescingHttpToolsProtocol,
    _Coalescing,
    default_max_connections,
    raise_open_file_limit,
)
from tests.conftest import eventually


class Recorder:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def writelines(self, data: tuple[bytes, ...]) -> None:
        self.writes.append(b"".join(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_a_head_and_its_body_go_out_in_one_write() -> None:
    recorder = Recorder()
    transport = _Coalescing(recorder, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert recorder.writes == []
    transport.write(b"{}")
    assert recorder.writes == [b"HTTP/1.1 200 OK\r\n\r\n{}"]
    big = b"x" * (128 * 1024)
    transport.write(b"head")
    transport.write(big)
    assert recorder.writes[-1] == b"head" + big
    assert transport.get_extra_info("peername") == "info:peername"  # everything else is the real transport's


async def test_a_lone_write_goes_out_by_the_next_loop_iteration_and_before_close() -> None:
    recorder = Recorder()
    transport = _Coalescing(recorder, asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"head only")
    await asyncio.sleep(0)
    assert recorder.writes == [b"head only"]
    transport.write(b"last words")
    transport.close()
    assert recorder.writes[-1] == b"last words" and recorder.closed


async def test_uvicorn_serves_through_it() -> None:
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await receive()
        body = scope["path"].encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=CoalescingHttpToolsProtocol, log_level="warning", lifespan="off"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done()
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        for path in ("/a", "/bb"):  # two requests on one keep-alive connection
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 200 OK")
            assert await asyncio.wait_for(reader.readexactly(len(path)), 10) == path.encode()
        writer.close()
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


# ----------------------------------------------------------------------------------------------------------------------
# the edge: read deadlines and the connection cap, on a real uvicorn over 127.0.0.1


class App:
    """``/hold`` answers once ``release`` is set (a long-poll); anything else reads the whole body and answers its
    length."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.held = 0

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":
            self.held += 1
            await self.release.wait()
            body = b"released"
        else:
            size, more = 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                size += len(message.get("body", b""))
                more = message.get("more_body", False)
            body = str(size).encode()
        headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextlib.asynccontextmanager
async def serving(app: App, **limits: Any) -> AsyncIterator[tuple[str, int]]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    protocol = CoalescingHttpToolsProtocol.configured(**limits)
    config = uvicorn.Config(app, http=protocol, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or serving.done(), 10, "uvicorn to start")
        assert not serving.done()
        yield sock.getsockname()
    finally:
        app.release.set()
        server.should_exit = True
        await asyncio.wait_for(serving, 10)


async def closed(reader: asyncio.StreamReader, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes the connection (bounded by ``timeout``)."""
    return await asyncio.wait_for(reader.read(), timeout)


def request(path: str, body: bytes = b"", length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    return f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {size}\r\n\r\n".encode() + body


async def test_the_header_and_body_deadlines_close_stalled_requests_with_408() -> None:
    app = App()
    async with serving(app, header_timeout_s=0.3, body_timeout_s=0.3) as address:
        silent_r, silent_w = await asyncio.open_connection(*address)
        head_r, head_w = await asyncio.open_connection(*address)
        head_w.write(b"POST /echo HTTP/1.1\r\nhost: x\r\n")
        body_r, body_w = await asyncio.open_connection(*address)
        body_w.write(request("/echo", b"12345", length=10))
        for reader in (silent_r, head_r, body_r):
            answer = await closed(reader)
            assert answer.startswith(b"HTTP/1.1 408 ") and b'"code": "request_timeout"' in answer, answer
        for writer in (silent_w, head_w, body_w):
            writer.close()


async def test_long_polls_and_slowly_pipelined_requests_outlive_the_deadlines() -> None:
    app = App()
    async with serving(app, header_timeout_s=0.3, body_timeout_s=0.3) as address:
        reader, writer = await asyncio.open_connection(*address)
        # a long-poll, and behind it a pipelined request whose body is not all there: the server reads no more of
        # it until the long-poll is answered, so its body deadline waits too
        writer.write(request("/hold") + request("/echo", b"12345", length=10))
        await eventually(lambda: app.held == 1, 10, "the long-poll to be held")
        # a stalled body sent after it is closed by its deadline: the deadlines of both have passed
        witness_r, witness_w = await asyncio.open_connection(*address)
        witness_w.write(request("/echo", b"1", length=2))
        assert (await closed(witness_r)).startswith(b"HTTP/1.1 408")
        witness_w.close()
        app.release.set()
        writer.write(b"67890")
        first = await asyncio.wait_for(reader.readuntil(b"released"), 10)
        assert first.startswith(b"HTTP/1.1 200")
        second = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n10"), 10)
        assert second.startswith(b"HTTP/1.1 200")
        writer.close()


async def test_past_the_cap_the_oldest_connection_without_a_request_is_closed() -> None:
    app = App()
    async with serving(app, max_connections=3, header_timeout_s=30) as address:
        idle = [await asyncio.open_connection(*address) for _ in range(3)]  # accepted in this order, before the 4th
        reader, writer = await asyncio.open_connection(*address)
        writer.write(request("/echo", b"abc"))
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n3"), 10)
        assert answer.startswith(b"HTTP/1.1 200")
        assert await closed(idle[0][0]) == b""  # the oldest slowloris made room
        for other, _ in idle[1:]:
            assert not other.at_eof()
        writer.close()
        for _, idle_writer in idle:
            idle_writer.close()


async def test_past_the_cap_with_every_connection_busy_a_new_one_is_refused_503() -> None:
    app = App()
    async with serving(app, max_connections=2, header_timeout_s=30) as address:
        busy = [await asyncio.open_connection(*address) for _ in range(2)]
        for _, writer in busy:
            writer.write(request("/hold"))
        await eventually(lambda: app.held == 2, 10, "two long-polls to be held")
        reader, writer = await asyncio.open_connection(*address)
        answer = await closed(reader)
        assert answer.startswith(b"HTTP/1.1 503 ") and b'"code": "overloaded"' in answer
        writer.close()
        app.release.set()
        for busy_reader, busy_writer in busy:  # the long-polls are answered as usual
            assert (await asyncio.wait_for(busy_reader.readuntil(b"released"), 10)).startswith(b"HTTP/1.1 200")
            busy_writer.close()


def test_limits_are_checked_and_the_default_cap_leaves_room_for_other_files() -> None:
    with pytest.raises(ValueError, match="header_timeout_s"):
        CoalescingHttpToolsProtocol.configured(header_timeout_s=0)
    custom = CoalescingHttpToolsProtocol.configured(max_connections=7)
    assert custom.max_connections == 7 and custom.body_timeout_s == CoalescingHttpToolsProtocol.body_timeout_s
    assert default_max_connections(1024) == 768
    assert default_max_connections(256) == 128
    assert default_max_connections(1 << 20) == 4096
    assert default_max_connections(None) == 4096


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        assert raise_open_file_limit() == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
