"""``flashpoint dev``: a project's endpoints behind Runpod Flash's ``flash dev`` URLs, on this machine's GPUs, reloaded
when a file changes without losing queued jobs.

Edge module, a composition root beside ``server.py``: a control plane with local workers and an in-memory job store,
the server's own app (``api.app.Dispatch``: Runpod's ``/v2`` API, the worker protocol, ``/v1``, ``/metrics``, the
route proxy) and, in front of it, ``DevApp``: ``GET /``, ``/ping``, ``/docs`` and the layout ``devlayout`` builds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from flashpoint.api.errors import status_of
from flashpoint.api.loopguard import UNSUPPORTED_MESSAGE, content_type_of, json_typed
from flashpoint.api.routeproxy import route_pattern
from flashpoint.api.runpod import Intake, parse_body, submit_checked
from flashpoint.api.workers import key_matches
from flashpoint.backends.local import python_env
from flashpoint.config import Settings
from flashpoint.dev.docs import docs_page
from flashpoint.dev.layout import (
    Call,
    Changes,
    Layout,
    Project,
    RouteEntry,
    build_layout,
    changes,
    is_project_path,
    load_project,
    spec_of,
)
from flashpoint.errors import BadInputError, ConfigError, Error, NotFoundError
from flashpoint.hosting.plane import bind_port, http_url, loopback, open_backend
from flashpoint.hosting.server import announce, input_checkers
from flashpoint.jobs import JobStatus, JobView
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.settings import PlaneSettings
from flashpoint.spec import WorkerTarget
from flashpoint.store.memory import MemoryJobStore
from flashpoint.wire import codec

log = logging.getLogger("flashpoint.dev")

#: Flash's answer to an empty input, which Runpod's platform refuses too
EMPTY_INPUT = (
    "Empty or null input. RunPod serverless requires at least one field in the input dict. Use explicit values or "
    'pass null for optional parameters, e.g. {"input": {"param_name": null}}.'
)
NO_ENDPOINTS = (
    "no endpoints found in {root}: declare one in a .py file, e.g.\n"
    "    @Endpoint(name='worker', gpu=GpuGroup.ANY)\n"
    "    async def process(input_data: dict) -> dict: ...\n"
    "or HTTP routes:\n"
    "    api = Endpoint(name='api', cpu='cpu3g-2-8')\n"
    "    @api.post('/compute')\n"
    "    async def compute(data: dict) -> dict: ..."
)


# --------------------------------------------------------------------------------------------------------------------
# The app


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


# --------------------------------------------------------------------------------------------------------------------
# The served project and its reloads


class DevSession:
    """One project as served: its layout on the app, its endpoints on the plane. ``apply`` serves a new load of it,
    replacing the workers of what changed (``devlayout.changes``); ``watch`` reloads on every change of a project
    ``.py`` file."""

    def __init__(
        self,
        root: Path,
        plane: ControlPlane,
        app: DevApp,
        code_dir: Path,
        *,
        say: Callable[[str], None] = print,
    ) -> None:
        self.root = root.resolve()
        self.plane = plane
        self.app = app
        self.code_dir = code_dir
        self.say = say
        self.project = Project(self.root, ())
        self.layout = Layout({}, (), {}, {})
        self._code_files = 0

    def _code_file(self, target: WorkerTarget) -> str | None:
        """A pickled target's file (a shared name's table, routes declared from several modules); a new file per
        registration, since workers of the old code may still read theirs."""
        if target.pickled is None:
            return None
        self._code_files += 1
        path = self.code_dir / f"{self._code_files}.pkl"
        path.write_bytes(target.pickled)
        return str(path)

    def apply(self, project: Project) -> Changes:
        """Serve ``project``: register what is new, replace the workers of what changed (their queued jobs wait for
        the new workers; running jobs end on the old ones), stop what was removed (its queued jobs are cancelled)."""
        layout = build_layout(project)
        diff = changes(self.project, self.layout, project, layout)
        retired = 0
        for name in diff.removed:
            handle = self.layout.endpoints[name]
            spec = spec_of(handle)
            if not spec.serves_routes:
                self.plane.purge(name)
            # kept registered (the plane has no unregister) with no warm workers, so none starts again
            self.plane.redeclare(dataclasses.replace(spec, workers_min=0), self.layout.targets[name])
        for name in (*diff.added, *diff.replaced):
            handle = layout.endpoints[name]
            spec, target = spec_of(handle), layout.targets[name]
            known = self.plane.endpoints.get(name)
            if known is not None and spec.serves_routes and not known.spec.serves_routes:
                self.plane.purge(name)  # its queued jobs could never run on route workers
            retired += self.plane.redeclare(spec, target, self._code_file(target))
        removed = {name: _removed(name) for name in self.plane.endpoints if name not in layout.endpoints}
        self.app.intake.checkers.clear()
        self.app.intake.checkers.update({**removed, **input_checkers(layout.endpoints)})
        if "PYTHONPATH" in self.plane.supervisor.worker_env:  # files in new folders: workers import them too
            self.plane.supervisor.worker_env["PYTHONPATH"] = python_env()["PYTHONPATH"]
        first = not self.layout.endpoints
        self.project, self.layout = project, layout
        self.app.layout = layout
        for rel, error in project.errors:
            served = any(rel in homes for homes in layout.homes.values())
            kept = "its last good version is served" if served else "not served"
            self.say(f"flashpoint dev: {rel} failed to load ({kept}): {error}")
        for problem in layout.problems:
            self.say(f"flashpoint dev: {problem}")
        if not first:
            self.say(f"flashpoint dev: reloaded: {_summary(diff, retired)}")
        return diff

    async def reload(self) -> Changes:
        """Load the project again (in a thread: a file's imports may take long), then ``apply`` it."""
        project = await asyncio.to_thread(load_project, self.root, self.project)
        return self.apply(project)

    async def watch(self, stop: asyncio.Event) -> None:
        """Reload after each batch of changes to project ``.py`` files, until ``stop`` is set."""
        import watchfiles

        def project_source(change: watchfiles.Change, path: str) -> bool:
            return path.endswith(".py") and is_project_path(self.root, Path(path))

        logging.getLogger("watchfiles").setLevel(logging.WARNING)
        async for _ in watchfiles.awatch(self.root, watch_filter=project_source, stop_event=stop):
            try:
                await self.reload()
            except Exception:  # a bug in one reload must not end reloading
                log.exception("reloading %s failed", self.root)


def _removed(name: str) -> Callable[[Any], None]:
    def refuse(payload: Any) -> None:
        raise BadInputError(f"endpoint {name!r} was removed from the project's files", code="not_found")

    return refuse


def _summary(diff: Changes, retired: int) -> str:
    if not diff:
        return "no endpoint changed"
    parts = []
    if diff.added:
        parts.append(f"added {', '.join(diff.added)}")
    if diff.replaced:
        parts.append(f"replaced {', '.join(diff.replaced)} ({retired} worker(s) retiring)")
    if diff.removed:
        parts.append(f"removed {', '.join(diff.removed)}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------------------------------
# The server


class DevServer:
    """``flashpoint dev``: load the project, serve it until SIGINT/SIGTERM, reloading on change (``reload``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        settings: Settings,
        host: str = "localhost",
        port: int = 8888,
        reload: bool = True,
        api_keys: tuple[str, ...] = (),
        max_body_bytes: int = 10 * 1024 * 1024,
        max_connections: int | None = None,
        header_timeout_s: float | None = None,
        body_timeout_s: float | None = None,
        say: Callable[[str], None] = print,
    ) -> None:
        """``max_connections``, ``header_timeout_s``, ``body_timeout_s``: the edge's, as serve's (None: defaults)."""
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ConfigError(f"{str(root)!r} is not a folder; name the project folder to serve (default: .)")
        if not api_keys and not loopback(host):
            raise ConfigError(
                f"refusing to listen on {host} without an API key: anyone who can reach it could run code. "
                "Set FLASHPOINT_API_KEY=<key>, or serve on localhost"
            )
        self.settings = settings
        self.host, self.port, self.reload = host, port, reload
        self.api_keys = api_keys
        self.max_body_bytes = max_body_bytes
        self.max_connections = max_connections
        self.header_timeout_s, self.body_timeout_s = header_timeout_s, body_timeout_s
        self.say = say

    def load(self) -> tuple[Project, Layout]:
        """The project as first served: every file must load (as Flash's dev server requires) and declare one
        endpoint at least.

        Raises:
            ConfigError: listing the files that failed, or saying how to declare an endpoint.
        """
        project = load_project(self.root)
        if project.errors:
            failed = "\n".join(f"  {rel}: {error}" for rel, error in project.errors)
            raise ConfigError(f"these files of {self.root} failed to load:\n{failed}")
        layout = build_layout(project)
        if not layout.endpoints:
            raise ConfigError(NO_ENDPOINTS.format(root=self.root))
        return project, layout

    def run(self) -> None:
        import uvicorn

        from flashpoint.api.app import Dispatch, create_app
        from flashpoint.api.loopguard import LoopbackGuard, host_names
        from flashpoint.api.transport import hardened_protocol

        # no bytecode of the project: a file saved twice within one second at one size would look unchanged to a
        # cached .pyc, here and in the workers
        sys.dont_write_bytecode = True
        project, layout = self.load()
        settings = self.settings
        simulated = settings.simulated_gpus or os.environ.get("FLASHPOINT_SIMULATED_GPUS") or None
        backend, worker_env, parent_pid = open_backend(settings, simulated)
        worker_env["PYTHONDONTWRITEBYTECODE"] = "1"
        sock = bind_port(self.host, self.port)
        bound, port = sock.getsockname()[:2]
        # where processes of this machine reach it (its workers, the CLI): loopback for a wildcard bind
        local_url = http_url("127.0.0.1" if bound in ("0.0.0.0", "::") else bound, port)
        plane = ControlPlane(
            MemoryJobStore(),
            backend,
            worker_secret=secrets.token_urlsafe(32),
            settings=PlaneSettings(
                take_hold_s=settings.take_hold_s,
                worker_env=worker_env,
                parent_pid=parent_pid,
                node=settings.node,
                base_url=settings.worker_url or local_url,
                route_ready_timeout_s=settings.route_ready_timeout_s,
            ),
        )
        code_dir = tempfile.TemporaryDirectory(prefix="flashpoint-dev-")
        # this machine's CLI gets a key of its own (in the announcement), so no configured key is ever written down
        cli_key = secrets.token_urlsafe(32) if self.api_keys else None
        api_keys = self.api_keys + ((cli_key,) if cli_key else ())
        announced: list[Path] = []
        stop = asyncio.Event()
        watching: list[asyncio.Task[None]] = []
        url = http_url(self.host, port)

        async def startup() -> None:
            await plane.start()
            session.apply(project)
            # announced before the line that says it serves: whoever waits for that line finds the file
            path = announce(settings.state_dir / "run", url=local_url, key=cli_key, app=str(self.root), kind="dev")
            if path is not None:
                announced.append(path)
            self._announce(session.layout, url, port, plane)
            if self.reload:
                watching.append(asyncio.create_task(session.watch(stop)))

        async def shutdown() -> None:
            for path in announced:
                path.unlink(missing_ok=True)
            stop.set()
            if watching:
                await asyncio.wait(watching, timeout=5)
            await plane.close()
            await dispatch.routes.close()
            code_dir.cleanup()

        intake = Intake({})
        api = create_app(
            plane,
            api_keys=api_keys,
            intake=intake,
            max_body_bytes=self.max_body_bytes,
            webhook_retry_delay_s=settings.webhook_retry_s,
            route_wait_s=settings.route_wait_s,
            on_startup=startup,
            on_shutdown=shutdown,
        )
        dispatch = Dispatch(api, plane)
        app = DevApp(
            dispatch, plane, intake, layout, api_keys=api_keys, max_body_bytes=self.max_body_bytes,
            title=str(self.root),
        )  # fmt: skip
        session = DevSession(self.root, plane, app, Path(code_dir.name), say=self.say)

        class _Uvicorn(uvicorn.Server):
            async def shutdown(self, sockets: Any = None) -> None:
                # stop workers and answer their long-polls first, so uvicorn finds no request left to cancel
                await plane.close()
                await super().shutdown(sockets)

        served: ASGIApp = app
        if not api_keys:  # only this machine's names, and no other origin's page (api/loopguard.py)
            served = LoopbackGuard(app, host_names(self.host, bound, worker_url=settings.worker_url))
        # serve's edge: header and body deadlines, a connection cap (api/transport.py)
        protocol = hardened_protocol(max_connections=self.max_connections, header_timeout_s=self.header_timeout_s,
                                     body_timeout_s=self.body_timeout_s)  # fmt: skip
        config = uvicorn.Config(
            served, http=protocol, log_level="warning", access_log=False, proxy_headers=False,
            timeout_graceful_shutdown=3,
        )  # fmt: skip
        _Uvicorn(config).run(sockets=[sock])

    def _announce(self, layout: Layout, url: str, port: int, plane: ControlPlane) -> None:
        busy = f"; port {self.port} was busy" if self.port not in (0, port) else ""
        self.say(f"flashpoint dev serving {url} (fleet: {plane.fleet_summary()}{busy})")
        rows = layout.rows()
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
        for method, path, name, endpoint in rows:
            self.say(f"  {method:<{widths[0]}}  {path:<{widths[1]}}  {name:<{widths[2]}}  {endpoint}")
        self.say(f"  docs  {url}/docs")
        self.say(f"  dashboard  {url}/ (in a browser)")
        self.say(f"  {'reloading on changes in ' + str(self.root) if self.reload else 'reload off'}; stop: ctrl+c")
