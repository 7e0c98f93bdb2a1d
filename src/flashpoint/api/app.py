"""The server's FastAPI app: Runpod client routes, worker routes, the native /v1 API and /metrics, all JSON; and
``Dispatch``, the server's ASGI app in front of it, which also sends ``/{route endpoint}/...`` to the route proxy."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Router
from starlette.types import Receive, Scope, Send

from flashpoint._version import __version__
from flashpoint.api import errors, native
from flashpoint.api.dashboard import dashboard_routes, replace_docs
from flashpoint.api.flashroute import FlashRoute, is_flash_call
from flashpoint.api.metrics import PlaneMetrics, metrics_route
from flashpoint.api.routeproxy import RouteProxy
from flashpoint.api.runpod import Intake, client_routes
from flashpoint.api.webhooks import Webhooks
from flashpoint.api.workers import json_response, worker_routes
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.wire.bodylimit import BodyLimit

log = logging.getLogger("flashpoint.api")


def create_app(
    plane: ControlPlane,
    *,
    api_keys: tuple[str, ...],
    intake: Intake,
    max_body_bytes: int = 10 * 1024 * 1024,
    webhook_retry_delay_s: float = 10.0,
    route_wait_s: float = 60.0,
    on_startup: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    body_exempt: Callable[[Scope], bool] | None = None,
) -> FastAPI:
    """Build the app over a plane; ``on_startup``/``on_shutdown`` run on the server's loop (start, recover, close).
    ``route_wait_s``: how long a request to a route endpoint waits for a ready worker before a 503. ``body_exempt``:
    the requests whose route bounds its body itself (``approutes.is_upload``)."""
    webhooks: list[Webhooks] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            await on_startup()
        # read here, not when the app is built: the server may set the intake's webhook policy after create_app
        allow_private = app.state.intake.allow_private_webhooks
        webhooks.append(Webhooks(plane, retry_delay_s=webhook_retry_delay_s, allow_private=allow_private))
        try:
            yield
        finally:
            for hooks in webhooks:
                await hooks.close()
            if on_shutdown is not None:
                await on_shutdown()

    app = FastAPI(
        title="flashpoint",
        version=__version__,
        summary="GPU endpoints on your own GPUs: Runpod's API, ordered GPU fallback, explanations.",
        lifespan=lifespan,
    )
    app.state.plane = plane
    app.state.api_keys = api_keys
    #: scoped keys' tokens to their principals (``guard.principal_lookup(keystore)``, set by ``serve``); None: none
    app.state.key_lookup = None
    app.state.intake = intake
    app.state.max_body_bytes = max_body_bytes
    app.state.route_wait_s = route_wait_s
    errors.install(app)
    # before the catch-all handler logs it as an unexpected error with its traceback
    app.add_exception_handler(ClientDisconnect, _client_gone)
    replace_docs(app)  # Swagger UI loads from a CDN: /docs and /redoc are a page of the package's own instead
    native.require_key_for_docs(app)
    app.include_router(native.router, prefix="/v1")
    metrics = PlaneMetrics(plane)
    app.state.metrics = metrics
    app.router.routes.append(metrics_route(metrics))
    app.router.routes.extend(dashboard_routes())  # the page needs no key; its calls to /v1 do
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, exempt=body_exempt)
    return app


#: the worker protocol's paths: the hot path of every job
_WORKER_PATH = re.compile(r"^/v2/[^/]+/(job-take|job-take-batch|job-stop|job-done|job-done-batch|job-stream|ping)/")


class Dispatch:
    """The server's ASGI app. Every job crosses the worker protocol and Runpod's client routes, so those go to bare
    routers (no dependency injection, no middleware but the body limit; they check keys themselves and answer errors
    as JSON); a path whose first segment names a route endpoint goes to the route proxy (``api/routeproxy.py``: it
    checks the key and the body limit itself); the rest (native /v1 API, /metrics, /docs, the dashboard at ``/`` and
    ``/static/dashboard/``) to the FastAPI app. Route endpoints cannot take the server's own names
    (``spec.RESERVED_NAMES``, ``static`` among them), so the two never meet."""

    def __init__(self, api: FastAPI, plane: ControlPlane) -> None:
        self.api = api
        self.routed = plane.routed
        self.routes = RouteProxy(
            plane,
            api.state.api_keys,
            max_body_bytes=api.state.max_body_bytes,
            wait_s=api.state.route_wait_s,
            metrics=api.state.metrics.routes,
            state=api.state,
        )
        self.workers = Router(routes=worker_routes(plane), default=_not_found)
        # every route reads the keys from the app's state at each request (api/guard.py): serve sets key_lookup late
        clients = Router(
            routes=client_routes(plane, api.state.api_keys, api.state.intake, state=api.state), default=_not_found
        )
        self.clients = BodyLimit(clients, api.state.max_body_bytes)
        # Runpod Flash's client: /v2/flash/runsync with X-Flash-Endpoint (without it, Runpod's route of "flash")
        flash = FlashRoute(plane, api.state.api_keys, api.state.intake, state=api.state)
        self.flash = BodyLimit(flash, api.state.max_body_bytes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if scope["type"] == "http" and scope["path"].startswith("/v2/"):
                if is_flash_call(scope):
                    await self.flash(scope, receive, send)
                else:
                    await (self.workers if _WORKER_PATH.match(scope["path"]) else self.clients)(scope, receive, send)
            elif self.routed and scope["type"] == "http" and (ep := self.routes.endpoint_of(scope["path"])):
                await self.routes.serve(ep, scope, receive, send)
            elif self.routed and scope["type"] == "http" and (ids := self.routes.ambiguous(scope["path"])):
                await self.routes.serve_named(ids, scope, receive, send)
            else:
                await self.api(scope, receive, send)
        except ClientDisconnect:  # the client hung up before its body arrived: nobody to answer, nothing to fix
            _log_gone(scope)


def _log_gone(scope: Scope) -> None:
    client = scope.get("client")
    who = f"{client[0]}:{client[1]}" if client else "a client"
    log.debug("%s hung up before sending its whole request (%s %s)", who, scope.get("method"), scope.get("path"))


async def _client_gone(request: Request, exc: Exception) -> Response:
    _log_gone(request.scope)
    return Response(status_code=400)  # never delivered: the connection is gone


async def _not_found(scope: Scope, receive: Receive, send: Send) -> None:
    message = f"no route {scope.get('method', '')} {scope['path']}"
    await json_response(errors.body("not_found", message), 404)(scope, receive, send)
