"""One write per response: the coalescing transport under uvicorn's httptools protocol."""

from __future__ import annotations

import asyncio
import socket

import uvicorn

from flashpoint.api.transport import CoalescingHttpToolsProtocol, _Coalescing


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
