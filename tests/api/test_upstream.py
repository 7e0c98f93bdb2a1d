"""The route proxy's client to workers (``api/upstream.py``) against real servers on 127.0.0.1: uvicorn serving a small
app for the well-behaved cases, and raw asyncio servers that answer scripted bytes for framing and failures."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from flashpoint.api import upstream
from flashpoint.api.upstream import Upstream, WorkerLost, WorkerTimeout
from tests.api.test_routeproxy import serving

GET = b"GET /%s HTTP/1.1\r\nhost: w\r\n\r\n"


async def _json(request: Request) -> Response:
    body = await request.body()
    return JSONResponse({"path": request.url.path, "body": body.decode(), "peer": request.client.port})  # type: ignore[union-attr]


async def _stream(request: Request) -> Response:
    release = request.app.state.release

    async def pieces() -> AsyncIterator[bytes]:
        yield b"first\n"
        await release.wait()
        yield b"second\n"

    return StreamingResponse(pieces())


async def _big(request: Request) -> Response:
    return Response(b"x" * (8 * upstream.HIGH_WATER))  # more than one read of the socket can hold


def _app() -> Starlette:
    app = Starlette(
        routes=[
            Route("/json", _json, methods=["GET", "POST", "HEAD"]),
            Route("/stream", _stream),
            Route("/big", _big),
        ]
    )
    app.state.release = asyncio.Event()
    return app


@contextlib.asynccontextmanager
async def scripted(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A raw server on 127.0.0.1 whose every connection ``answer`` handles (until the client hangs up); its address."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    try:
        yield f"{host}:{port}"
    finally:
        server.close()
        await server.wait_closed()


async def _request_head(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


async def test_sequential_requests_reuse_one_connection_and_bodies_arrive_whole() -> None:
    async with serving(_app()) as address:
        pool = Upstream(connect_timeout_s=5)
        peers = set()
        for i in range(3):
            exchange = await pool.exchange(address, 5)
            body = b"n=%d" % i
            exchange.send(b"POST /json HTTP/1.1\r\nhost: w\r\ncontent-length: %d\r\n\r\n" % len(body), body)
            status, headers = await exchange.head()
            assert status == 200 and exchange.length is not None
            assert (b"content-type", b"application/json") in headers
            answer = b""
            while not exchange.done:
                answer += await exchange.read()
            assert await exchange.read() == b""
            exchange.release()
            assert f'"body":"n={i}"'.encode() in answer
            peers.add(answer.split(b'"peer":')[1])
        assert pool.opened == 1 and len(peers) == 1
        pool.close()


async def test_an_answer_sent_in_one_write_is_whole_when_its_head_is_read() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await _request_head(reader):
            writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 11\r\n\r\n{"ok":true}')
            await writer.drain()

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        for _ in range(2):
            exchange = await pool.exchange(address, 5)
            exchange.send(GET % b"x", None)
            assert await exchange.head() == (200, [(b"content-length", b"11")])
            assert exchange.complete  # read() will not wait
            assert await exchange.read() == b'{"ok":true}' and exchange.done
            exchange.release()
        assert pool.opened == 1


async def test_a_stream_comes_piece_by_piece_as_the_worker_sends_it() -> None:
    app = _app()
    async with serving(app) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 5)
        exchange.send(GET % b"stream", None)
        status, _ = await exchange.head()
        assert status == 200 and exchange.length is None
        assert await exchange.read() == b"first\n"
        assert not exchange.done  # the second piece is not sent until the app is released
        app.state.release.set()
        rest = b""
        while not exchange.done:
            rest += await exchange.read()
        assert rest == b"second\n"
        exchange.release()
        again = await pool.exchange(address, 5)  # a chunked answer read to its end leaves the connection reusable
        again.send(GET % b"json", None)
        assert (await again.head())[0] == 200
        again.release()
        assert pool.opened == 1


async def test_a_head_answer_ends_with_its_head_and_its_connection_is_not_reused() -> None:
    async with serving(_app()) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 2)
        exchange.send(b"HEAD /json HTTP/1.1\r\nhost: w\r\n\r\n", None, head_only=True)
        status, headers = await exchange.head()
        assert status == 200 and any(n == b"content-length" and v != b"0" for n, v in headers)
        assert exchange.done and await exchange.read() == b""
        exchange.release()
        follow = await pool.exchange(address, 2)
        follow.send(GET % b"json", None)
        assert (await follow.head())[0] == 200
        follow.release()
        assert pool.opened == 2


async def test_reading_pauses_past_the_high_water_mark_and_resumes_when_taken() -> None:
    async with serving(_app()) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 5)
        exchange.send(GET % b"big", None)
        await exchange.head()
        conn = exchange._conn
        while not conn.paused and not conn.complete:
            await conn.wait(5)
        assert conn.paused and not conn.complete  # stopped reading with the answer unfinished
        total = 0
        while not exchange.done:
            total += len(await exchange.read())
        assert total == 8 * upstream.HIGH_WATER and not conn.paused
        exchange.release()


async def test_an_answer_without_framing_ends_when_the_worker_closes() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 5)
        exchange.send(GET % b"x", None)
        assert (await exchange.head())[0] == 200
        body = b""
        while not exchange.done:
            body += await exchange.read()
        assert body == b"until the end"
        exchange.release()
        assert not pool._idle.get(address)


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (b"", "hung up"),  # closed before answering
        (b"not http at all\r\n\r\n", "not HTTP"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort", "hung up"),  # closed mid-body
    ],
)
async def test_a_worker_that_hangs_up_or_speaks_nonsense_is_lost(script: bytes, reason: str) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(script)
        await writer.drain()
        writer.close()

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 5)
        exchange.send(GET % b"x", None)
        with pytest.raises(WorkerLost, match=reason):
            await exchange.head()
            while not exchange.done:
                await exchange.read()
        exchange.release()
        assert not pool._idle.get(address)


def _head(size: int) -> bytes:
    """An answer whose head (status line, headers, blank line) is ``size`` bytes, with a body of 2."""
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n"
    filler = 0
    while len(head) + 2 < size:
        room = size - len(head) - 2 - len(b"x-f00000: \r\n")
        head += b"x-f%05d: %s\r\n" % (filler, b"a" * max(0, min(1000, room)))
        filler += 1
    assert len(head) + 2 == size
    return head + b"\r\nok"


@pytest.mark.parametrize(
    ("size", "pieces", "taken"),
    [
        (upstream.MAX_HEAD_BYTES - 512, 1, True),
        (upstream.MAX_HEAD_BYTES - 512, 97, True),  # trickled: each piece its own read
        (upstream.MAX_HEAD_BYTES + 512, 1, False),  # in one read, or a few
        (upstream.MAX_HEAD_BYTES + 512, 97, False),
        (8 * upstream.MAX_HEAD_BYTES, 1, False),
    ],
)
async def test_an_answer_head_past_the_limit_is_a_bad_answer(size: int, pieces: int, taken: bool) -> None:
    answer_bytes = _head(size)
    step = -(-len(answer_bytes) // pieces)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        for start in range(0, len(answer_bytes), step):
            writer.write(answer_bytes[start : start + step])
            await writer.drain()
        await reader.read()  # until the client closes

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 30)
        exchange.send(GET % b"x", None)
        if taken:
            status, headers = await asyncio.wait_for(exchange.head(), 10)
            assert status == 200 and len(headers) > 60
            assert await exchange.read() == b"ok"
        else:
            with pytest.raises(upstream.BadAnswer, match="head passed 64 KiB"):
                await asyncio.wait_for(exchange.head(), 10)  # at once, not at the read deadline
        exchange.release()
        assert bool(pool._idle.get(address)) is taken  # a bad answer's connection is closed


async def test_an_endless_header_is_a_bad_answer_and_its_connection_closed() -> None:
    closed = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nx-endless: ")
        try:
            for _ in range(64 * 1024):  # at most 64 MiB of one header's value, never ended
                writer.write(b"a" * 1024)
                await writer.drain()
        except ConnectionError:
            closed.set()

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 30)
        exchange.send(GET % b"x", None)
        with pytest.raises(upstream.BadAnswer):
            await asyncio.wait_for(exchange.head(), 10)
        exchange.release()
        await asyncio.wait_for(closed.wait(), 10)  # the worker's writes fail: nobody reads them any more


async def test_a_head_that_trickles_in_times_out_at_the_read_deadline_all_the_same() -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(2000):  # a header line every 20 ms for 40 s at most: each byte is news, none ends the head
            writer.write(b"x-slow: 1\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 0.3)  # the deadline is the head's, not each piece's
        exchange.send(GET % b"x", None)
        with pytest.raises(WorkerTimeout):
            await asyncio.wait_for(exchange.head(), 20)
        exchange.release()


async def test_a_silent_worker_times_out_at_the_read_deadline() -> None:
    gone = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request_head(reader)
        await reader.read()  # says nothing until the client closes
        gone.set()

    async with scripted(answer) as address:
        pool = Upstream(connect_timeout_s=5)
        exchange = await pool.exchange(address, 0.05)
        exchange.send(GET % b"x", None)
        with pytest.raises(WorkerTimeout):
            await exchange.head()
        exchange.release()  # an unfinished exchange closes its connection
        await asyncio.wait_for(gone.wait(), 5)


async def test_a_refused_connection_is_lost_with_the_address() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        pool = Upstream(connect_timeout_s=5)
        with pytest.raises(WorkerLost, match=f"127.0.0.1:{port}"):
            await pool.exchange(f"127.0.0.1:{port}", 5)


async def test_idle_connections_past_their_age_and_closed_ones_are_not_reused() -> None:
    async with serving(_app()) as address:
        pool = Upstream(connect_timeout_s=5, idle_s=0.0)
        for _ in range(2):
            exchange = await pool.exchange(address, 5)
            exchange.send(GET % b"json", None)
            await exchange.head()
            await exchange.read()
            exchange.release()
        assert pool.opened == 2  # the first aged out at once
        pool.idle_s = 60.0  # the second is reused
        exchange = await pool.exchange(address, 5)
        exchange.send(GET % b"json", None)
        await exchange.head()
        await exchange.read()
        exchange.release()
        (conn,) = pool._idle[address]
        assert conn.transport is not None
        conn.transport.close()  # as when the worker stops: closing, not yet lost
        fresh = await pool.exchange(address, 5)
        assert fresh._conn is not conn and pool.opened == 3
        fresh.release()
        pool.close()
