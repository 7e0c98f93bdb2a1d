"""An HTTP-route endpoint as Flash users declare one, served by real route workers in
``tests/e2e/test_route_worker.py`` (``python -m flashpoint.worker --routes --import tests.apps.routes_app:api``).

Every way a route takes its parameters is here: a JSON body, query parameters, path parameters, a multipart upload;
and every way it answers: JSON, an error, a JSON-lines stream and server-sent events. The streams wait between their
first chunk and the rest until the test opens their gate (``POST /gates/{name}``), so a test can see the first chunk
arrive before the stream has ended (bounded: a gate nobody opens ends the stream after 30 s).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from starlette.requests import Request
from starlette.responses import StreamingResponse

from flashpoint import Endpoint

api = Endpoint(name="routes-app", cpu="cpu3c-1-2", workers=(1, 2))

#: the gates the streams wait on, by name (a worker process serves one test)
_gates: dict[str, threading.Event] = {}
_lock = threading.Lock()


def _gate(name: str) -> threading.Event:
    with _lock:
        return _gates.setdefault(name, threading.Event())


@api.get("/health")
async def health() -> dict[str, Any]:
    return {"status": "ok", "endpoint": os.environ.get("FLASHPOINT_ENDPOINT", "")}


@api.post("/compute")
async def compute(numbers: list[float], scale: float = 1.0) -> dict[str, float]:
    print(f"computing the sum of {numbers}")  # reaches the plane as a line, while the worker runs
    return {"sum": sum(numbers) * scale}


@api.get("/items/{item_id}")
def get_item(item_id: int, q: str = "", tags: list[str] | None = None) -> dict[str, Any]:
    return {"id": item_id, "q": q, "tags": tags or []}


@api.put("/items/{item_id}")
def put_item(item_id: int, name: str, price: float = 0.0) -> dict[str, Any]:
    return {"id": item_id, "name": name, "price": price}


@api.patch("/items/{item_id}")
async def patch_item(item_id: int, price: float) -> dict[str, Any]:
    return {"id": item_id, "price": price}


@api.delete("/items/{item_id}")
def delete_item(item_id: int) -> dict[str, Any]:
    return {"deleted": item_id}


@api.post("/upload")
def upload(file: bytes, label: str = "") -> dict[str, Any]:
    return {"size": len(file), "label": label, "head": file[:4].decode(errors="replace")}


@api.post("/fail")
def fail(message: str = "boom") -> None:
    raise ValueError(message)


@api.get("/headers")
def headers(request: Request) -> dict[str, str]:
    """The request's headers, as the route sees them."""
    return dict(request.headers)


@api.post("/gates/{name}")
def open_gate(name: str) -> dict[str, str]:
    _gate(name).set()
    return {"opened": name}


@api.get("/stream")
def stream(gate: str, n: int = 3) -> Iterator[dict[str, Any]]:
    """A sync generator: JSON lines; the items after the first wait for the gate."""
    yield {"i": 0}
    if not _gate(gate).wait(timeout=30):
        yield {"error": "gate never opened"}
        return
    for i in range(1, n):
        yield {"i": i}


@api.post("/events")
async def events(gate: str, n: int = 3) -> StreamingResponse:
    """Server-sent events from an async generator; the events after the first wait for the gate."""

    async def source() -> AsyncIterator[str]:
        yield "event: tick\ndata: 0\n\n"
        if not await asyncio.to_thread(_gate(gate).wait, 30):
            yield "event: error\ndata: gate never opened\n\n"
            return
        for i in range(1, n):
            yield f"event: tick\ndata: {i}\n\n"

    return StreamingResponse(source(), media_type="text/event-stream")
