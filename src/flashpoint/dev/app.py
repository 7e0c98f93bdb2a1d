"""``flashpoint dev``'s ASGI app: Flash's dev layout (``GET /``, ``/ping``, ``/docs``, ``/<file>/runsync`` calls and
``/<file>/<route>`` paths, as ``layout`` builds them) in front of the server's own app (``api.app.Dispatch``: Runpod's
``/v2`` API, the worker protocol, ``/v1``, ``/metrics``, the route proxy), which answers every other path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from flashpoint.api.errors import status_of
from flashpoint.api.loopguard import UNSUPPORTED_MESSAGE, content_type_of, json_typed
from flashpoint.api.routeproxy import route_pattern
from flashpoint.api.runpod import Intake, parse_body, submit_checked
from flashpoint.api.workers import key_matches
from flashpoint.dev.docs import docs_page
from flashpoint.dev.layout import Call, Layout, RouteEntry
from flashpoint.errors import BadInputError, Error, NotFoundError
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.wire import codec

log = logging.getLogger("flashpoint.dev")

#: Flash's answer to an empty input, which Runpod's platform refuses too
EMPTY_INPUT = (
    "Empty or null input. RunPod serverless requires at least one field in the input dict. Use explicit values or "
    'pass null for optional parameters, e.g. {"input": {"param_name": null}}.'
)


def _wants_html(scope: Scope) -> bool:
    """Whether a request asks for a web page (a browser's ``Accept: text/html,...``) rather than JSON (curl and HTTP
    clients send ``*/*`` or ``application/json``): ``GET /`` answers a browser with the dashboard, as Flash's JSON
    ``{"message", "docs"}`` otherwise."""
    accept = dict(scope["headers"]).get(b"accept", b"").decode("latin-1").lower()
    return "text/html" in accept


async def _send_json(send: Send, status: int, body: Any, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await _send(send, status, codec.json_bytes(body), b"application/json", headers)


async def _send(send: Send, status: int, body: bytes, kind: bytes, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    head = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client hung up")
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _failure(view: JobView) -> dict[str, Any]:
    """A job that did not complete, as Flash's dev server answers it (``error``), with the job beside it."""
    error = view.error
    if error is not None:
        message = error.message or error.type
    else:
        message = f"the job ended {view.status.value}" + (f" ({view.reason.value})" if view.reason else "")
    body: dict[str, Any] = {"error": message, "id": view.id, "status": view.status.value}
    if error is not None:
        body["type"] = error.type
    return body


class DevApp:
    """The dev server's ASGI app: Flash's dev layout in front of the server's app (``inner``), which answers every
    other path (``/v2``, ``/v1``, ``/metrics``, ``/<route endpoint>/...``, and the 404s).

    Answers (Flash's): a completed call is 200 ``{"id", "status": "COMPLETED", "output"}``; a job that failed, timed
    out or was cancelled is 500 ``{"error": message, "id", "status", "type"}``; a request refused before any job exists
    is a 4xx ``{"detail": message}`` (FastAPI's shape, as Flash's dev server answers): 422 for input that is not
    ``{"input": {...}}``, is empty, or does not fit the signature, 401 without the key (when the server has keys), 405,
    413, 415 (a server without keys takes only a body declared ``application/json``) and 429 (the queue is full);
    503 ``{"error"}`` at once for an endpoint that can never run on this fleet.
    """

    def __init__(
        self,
        inner: ASGIApp,
        plane: ControlPlane,
        intake: Intake,
        layout: Layout,
        *,
        api_keys: tuple[str, ...] = (),
        max_body_bytes: int = 10 * 1024 * 1024,
        title: str = "",
    ) -> None:
        self.inner = inner
        self.plane = plane
        self.intake = intake
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.title = title
        self._patterns: list[tuple[RouteEntry, re.Pattern[str]]] = []
        self.layout = layout

    @property
    def layout(self) -> Layout:
        return self._layout

    @layout.setter
    def layout(self, layout: Layout) -> None:
        self._layout = layout
        self._patterns = [(entry, route_pattern(entry.path)) for entry in layout.routes]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        if path in ("/", "/ping", "/docs"):
            if method not in ("GET", "HEAD"):
                await _send_json(send, 405, {"detail": "Method Not Allowed"}, [(b"allow", b"GET, HEAD")])
            elif path == "/" and _wants_html(scope):  # a browser: the dashboard (its calls to /v1 take the key)
                await self.inner(scope, receive, send)
            elif path == "/":
                await _send_json(send, 200, {"message": "flashpoint dev server", "docs": "/docs"})
            elif path == "/ping":
                await _send_json(send, 200, {"status": "healthy"})
            elif await self._authorized(scope, send):
                page = docs_page(self.layout, _base_url(scope), keyed=bool(self.api_keys), title=self.title)
                await _send(send, 200, page.encode(), b"text/html; charset=utf-8")
            return
        call = self.layout.calls.get(path)
        if call is not None:
            await self._runsync(call, scope, receive, send)
            return
        entry = self._route(method, path)
        if entry is not None:
            await self.inner(_rewritten(scope, entry), receive, send)
            return
        await self.inner(scope, receive, send)

    def _route(self, method: str, path: str) -> RouteEntry | None:
        """The route a path matches (of the same method first: another method's worker answers the 405); else, as
        the server's proxy forwards anything under ``/<endpoint>/``, the first route of the longest file prefix the
        path is under (its worker answers the 404)."""
        other = under = None
        for entry, pattern in self._patterns:
            if pattern.fullmatch(path):
                if entry.method == method:
                    return entry
                other = other or entry
            elif path.startswith(entry.prefix + "/") and (under is None or len(entry.prefix) > len(under.prefix)):
                under = entry
        return other or under

    async def _authorized(self, scope: Scope, send: Send) -> bool:
        if not self.api_keys:
            return True
        header = dict(scope["headers"]).get(b"authorization")
        if key_matches(header.decode("latin-1") if header is not None else None, self.api_keys):
            return True
        detail = {"detail": "send the API key as Authorization: Bearer KEY"}
        await _send_json(send, 401, detail, [(b"www-authenticate", b"Bearer")])
        return False

    async def _runsync(self, call: Call, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await _send_json(send, 405, {"detail": "Method Not Allowed"}, [(b"allow", b"POST")])
            return
        if not await self._authorized(scope, send):
            return
        try:
            raw = await _read_body(receive, self.max_body_bytes)
        except _TooLarge:
            detail = f"request body is larger than the limit of {self.max_body_bytes} bytes"
            await _send_json(send, 413, {"detail": detail})
            return
        except ConnectionResetError:
            return
        given: dict[str, Any] = {}
        if call.takes_input and not self.api_keys and not json_typed(content_type_of(scope["headers"])):
            # without a key, a body any web page could send (a form, text/plain) runs nothing (api/loopguard.py)
            await _send_json(send, 415, {"detail": UNSUPPORTED_MESSAGE})
            return
        if call.takes_input:  # a callable without parameters ignores the body, as Flash's does
            try:
                data = parse_body(raw)
            except BadInputError as exc:
                await _send_json(send, 422, {"detail": str(exc)})
                return
            if data["input"] is None or data["input"] == {}:
                await _send_json(send, 422, {"detail": EMPTY_INPUT})
                return
            if not isinstance(data["input"], dict):
                detail = f"input must be a JSON object of {call.name}'s arguments, e.g. {json.dumps(call.example)}"
                await _send_json(send, 422, {"detail": detail})
                return
            given = data["input"]
        request: dict[str, Any] = {"input": call.job_input(given)}
        if call.target is not None:
            request["flashpoint"] = {"target": call.target}
        ep = self.plane.endpoints.get(call.endpoint)
        if ep is not None and ep.never is not None:
            summary = self.plane.explain_endpoint(call.endpoint).summary
            await _send_json(send, 503, {"error": f"endpoint {call.endpoint!r} {summary}"})
            return
        try:
            job = submit_checked(self.plane, call.endpoint, request, self.intake, size=len(raw))
        except Error as exc:
            status = 422 if isinstance(exc, BadInputError) else status_of(exc)
            await _send_json(send, status, {"detail": str(exc)} if status < 500 else {"error": str(exc)})
            return
        view = await self._wait(job.id, receive)
        if view is None:  # the caller hung up: nobody will read the answer, so the job need not run
            with contextlib.suppress(NotFoundError):  # gone already (its TTL)
                self.plane.cancel(job.id)
            return
        if view.status is JobStatus.COMPLETED:
            await _send_json(send, 200, {"id": view.id, "status": view.status.value, "output": view.output})
            return
        if view.error is not None and view.error.traceback:
            log.warning("job %s of %s ended %s:\n%s", view.id, view.endpoint, view.status.value, view.error.traceback)
        await _send_json(send, 500, _failure(view))

    async def _wait(self, job_id: str, receive: Receive) -> JobView | None:
        """The job once it ends, or None if the client hangs up first."""
        waiting = asyncio.ensure_future(self.plane.wait(job_id))
        gone = asyncio.ensure_future(_until_disconnect(receive))
        try:
            await asyncio.wait((waiting, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not waiting.done():
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            return None
        return waiting.result()


def _rewritten(scope: Scope, entry: RouteEntry) -> Scope:
    """``/<file prefix>/<route path>`` as the route proxy takes it: ``/<endpoint>/<route path>``, the path below
    the prefix kept as the client encoded it."""
    depth = entry.prefix.count("/")
    raw: bytes = scope.get("raw_path") or scope["path"].encode()
    cut = -1
    for _ in range(depth + 1):
        cut = raw.find(b"/", cut + 1)
        if cut < 0:
            break
    rest = raw[cut:] if cut >= 0 else b"/"
    name = "/" + entry.endpoint
    return {**scope, "path": name + scope["path"][len(entry.prefix) :], "raw_path": name.encode() + rest}


def _base_url(scope: Scope) -> str:
    host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
    if not host and scope.get("server"):
        server_host, server_port = scope["server"][0], scope["server"][1]
        host = f"{server_host}:{server_port}"
    return f"{scope.get('scheme', 'http')}://{host or 'localhost'}"
