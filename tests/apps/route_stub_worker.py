"""A stand-in route worker: any HTTP server on ``$PORT`` that answers ``GET /ping`` is a Runpod load-balanced worker,
and so a flashpoint route worker. It knows nothing of flashpoint (no import of it), which is the point: the server's
proxy must serve an unmodified worker.

``/ping`` answers 204 until a short start-up step (``ROUTE_STUB_START_S``, 0.3 s) is done, then 200. Routes:
``/echo`` (any method: what the worker received), ``/items/{item_id}`` and ``/raw/{rest:path}`` (the same),
``/stream?id=X`` (one chunk, then the next only once ``POST /release/X`` came), ``/slow?seconds=N``,
``/status/{code}``, ``/whoami`` (its variables, and the route secrets it was presented).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

READY = asyncio.Event()
#: a stream's next chunks wait for its release
GATES: dict[str, asyncio.Event] = {}
WORKER = os.environ.get("FLASHPOINT_WORKER_ID", "?")


async def ping(request: Request) -> Response:
    return Response(status_code=200 if READY.is_set() else 204)


async def echo(request: Request) -> Response:
    body = await request.body()
    return JSONResponse(
        {
            "worker": WORKER,
            "method": request.method,
            "path": request.url.path,
            "rawPath": request.scope.get("raw_path", b"").decode(),
            "query": request.url.query,
            "body": body.decode(errors="replace"),
            "headers": [[name.decode(), value.decode()] for name, value in request.headers.raw],
            "pathParams": dict(request.path_params),
        }
    )


def gate(stream_id: str) -> asyncio.Event:
    return GATES.setdefault(stream_id, asyncio.Event())


async def stream(request: Request) -> Response:
    released = gate(request.query_params.get("id", "default"))

    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: first\n\n"
        await asyncio.wait_for(released.wait(), 60)  # bounded: a test that never releases fails, not hangs
        yield b"data: second\n\n"
        yield b"data: third\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


async def release(request: Request) -> Response:
    gate(request.path_params["stream_id"]).set()
    return JSONResponse({"released": request.path_params["stream_id"]})


async def slow(request: Request) -> Response:
    seconds = float(request.query_params.get("seconds", "1"))
    await asyncio.sleep(seconds)
    return JSONResponse({"worker": WORKER, "slept": seconds})


async def status(request: Request) -> Response:
    return JSONResponse({"status": int(request.path_params["code"])}, status_code=int(request.path_params["code"]))


async def whoami(request: Request) -> Response:
    variables = ("PORT", "PORT_HEALTH", "FLASHPOINT_ROUTE_HOST", "FLASHPOINT_MAX_BODY_MB", "FLASHPOINT_ROUTE_SECRET")
    return JSONResponse({"worker": WORKER, "pid": os.getpid(), "port": os.environ.get("PORT"),
                         "env": {name: os.environ.get(name) for name in variables},
                         "presented": request.headers.getlist("x-flashpoint-route-secret")})  # fmt: skip


ANY = ["GET", "POST", "PUT", "PATCH", "DELETE"]
app = Starlette(
    routes=[
        Route("/ping", ping),
        Route("/echo", echo, methods=ANY),
        Route("/items/{item_id}", echo, methods=ANY),
        Route("/raw/{rest:path}", echo, methods=ANY),
        Route("/stream", stream),
        Route("/release/{stream_id}", release, methods=["POST"]),
        Route("/slow", slow),
        Route("/status/{code:int}", status, methods=ANY),
        Route("/whoami", whoami),
    ]
)


async def main() -> None:
    config = uvicorn.Config(
        app,
        host=os.environ.get("FLASHPOINT_ROUTE_HOST", "0.0.0.0"),
        port=int(os.environ["PORT"]),
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve())
    await asyncio.sleep(float(os.environ.get("ROUTE_STUB_START_S", "0.3")))  # the worker's own start-up step
    READY.set()
    await serving


if __name__ == "__main__":
    asyncio.run(main())
