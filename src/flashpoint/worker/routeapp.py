"""A route worker's app: the FastAPI app an HTTP-route endpoint's workers serve, built from its route functions as
Runpod Flash's ``runtime/lb_handler.py`` builds it, plus ``GET /ping``, a body limit and JSON errors.

- ``GET``: FastAPI reads the function's signature (scalars from the query string, ``{x}`` from the path); a
  parameter typed as a list (``tags: list[str]``) is a repeated query parameter (``?tags=a&tags=b``).
- ``POST``/``PUT``/``PATCH``/``DELETE``: the JSON body's fields are the parameters, validated by a pydantic model
  built from the signature (``{x}`` path parameters apart). With a ``bytes`` (or ``UploadFile``) parameter the body is
  multipart instead: those are files, the rest form fields. A parameter typed as a pydantic model leaves the whole
  signature to FastAPI, as in Flash. Parameters FastAPI fills itself (``request: Request``, ``Depends(...)``,
  ``Header()``, ...) are left to it everywhere.
- Sync ``def`` functions run in a thread, ``async def`` ones on the loop. A response object (``StreamingResponse``,
  an ``EventSourceResponse``, ``JSONResponse``...) is sent as it is; a generator or async generator (returned, or the
  function is one) streams as JSON lines (``application/jsonl``, one item per line, as FastAPI streams ``yield``);
  anything else is JSON.
- ``GET /ping``: 204 until the app's startup (its lifespan) has run, then 200 ``{"status": "healthy"}``.
- The route secret (``route_secret``, the worker's ``FLASHPOINT_ROUTE_SECRET``): every request, ``/ping`` included,
  must carry it in ``wire.ROUTE_SECRET_HEADER`` (compared in constant time), else 403 ``forbidden`` and nothing of
  the endpoint's runs; the header is removed before the route sees the request.
- Errors: validation is FastAPI's 422 with its ``detail``; a function that raises gives 500
  ``{"error", "code": "handler_error", "type", "message"}`` and its traceback on stderr; a body over the limit is 413
  ``payload_too_large``.

Worker side: imports FastAPI, Starlette and pydantic (only route workers load this module); never ``store/`` or
``scheduler/``.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import json
import os
import sys
import traceback
import types
import typing
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Annotated, Any, get_args, get_origin

import anyio
import fastapi
import starlette
from fastapi import BackgroundTasks, Body, FastAPI, File, Form, Query, UploadFile, params
from fastapi.encoders import jsonable_encoder
from fastapi.security import SecurityScopes
from pydantic import BaseModel, ConfigDict, Field, create_model
from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flashpoint.runpodapps.serving import run_hook
from flashpoint.sdk.routes import Route, path_params
from flashpoint.wire import bodylimit
from flashpoint.wire.bodylimit import BodyLimit
from flashpoint.wire.protocol import ROUTE_SECRET_ENV, ROUTE_SECRET_HEADER

__all__ = ["BODY_METHODS", "MAX_BODY_BYTES", "create_app"]

#: methods whose parameters come from the request body (Flash's ``_BODY_METHODS``)
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: the default body limit (``FLASHPOINT_MAX_BODY_MB``, 32)
MAX_BODY_BYTES = 32 * 2**20

_SKIPPED = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
#: the wrapper's parameter holding the body model (not a name a route function can have: it starts with two "_")
_BODY = "__flashpoint_body"


def create_app(
    routes: Sequence[Route], *, max_body_bytes: int = MAX_BODY_BYTES, route_secret: str | None = None
) -> FastAPI:
    """The worker's ASGI app serving ``routes`` (``(method, path, function)``), ``GET /ping`` and nothing else (no
    ``/docs``: every path but ``/ping`` is the endpoint's own). With ``route_secret`` (a worker always has one:
    ``routeserver``), only requests carrying it are served; None (in-process tests) serves every request.

    Raises:
        TypeError: a route function whose signature cannot become a request (the route is named).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.ready = True
        try:
            yield
        finally:
            app.state.ready = False

    # no redirect for a trailing slash: behind the server's /NAME prefix its Location (the worker's own address and
    # path) would lead nowhere; /x/ is 404 where /x is declared
    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    app.state.ready = False
    app.add_api_route("/ping", _ping, methods=["GET"], include_in_schema=False)
    for method, path, fn in routes:
        try:
            endpoint = endpoint_for(method, path, fn)
            app.add_api_route(path, endpoint, methods=[method], response_model=None, name=fn.__name__)
        except Exception as exc:
            raise TypeError(f"route {method} {path} ({fn.__name__}) cannot be served: {exc}") from exc
    # the last added is the outermost: errors around the body limit around FastAPI's own handling
    app.add_middleware(
        BodyLimit, max_bytes=max_body_bytes, advice="send less, or raise the worker's FLASHPOINT_MAX_BODY_MB"
    )
    app.add_middleware(Errors)
    if route_secret is not None:
        app.add_middleware(RouteSecret, secret=route_secret)  # outermost: nothing runs before it
    return app


def serve_app(app: ASGIApp, *, max_body_bytes: int = MAX_BODY_BYTES, route_secret: str | None = None) -> ASGIApp:
    """A worker's ASGI app around an app of the user's own (Runpod SDK 2.x's ``@app.api`` factory, or its class's
    routes): ``GET /ping`` answered beside it (healthy once its lifespan has started), the same body limit and route
    secret as ``create_app``'s, and its JSON 500 for an exception that reaches it (a FastAPI app answers its own
    errors first); everything else, lifespan included, is the app's."""
    wrapped: ASGIApp = BodyLimit(
        Pinged(app), max_bytes=max_body_bytes, advice="send less, or raise the worker's FLASHPOINT_MAX_BODY_MB"
    )
    wrapped = Errors(wrapped)
    return RouteSecret(wrapped, route_secret) if route_secret is not None else wrapped


def rc2_app(handle: Any) -> ASGIApp:
    """The app of Runpod SDK 2.x's ``@app.api`` handle (decision 0108): the factory's, as it is; or one instance of the
    class, its ``@init`` method run (awaited when async), and its marked methods served as FastAPI routes with
    FastAPI's own semantics (rc2's runtime serves them with FastAPI: ``async def generate(self, body: dict)`` takes
    the JSON body).

    Raises:
        TypeError: the factory returned no ASGI app, or a route cannot be served (named).
    """
    factory = getattr(handle, "_asgi_factory", None)
    if factory is not None:
        made = factory()
        if not callable(made):
            raise TypeError(f"@app.api function {factory.__name__} returned {type(made).__name__}, not an ASGI app")
        app: ASGIApp = made
        return app
    cls = handle._cls
    instance = cls()
    init_name = getattr(handle, "_init_name", None)
    if init_name is not None:
        run_hook(getattr(instance, init_name))
    served = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, redirect_slashes=False)
    for route in handle.spec.routes:
        try:
            served.add_api_route(
                route.path, getattr(instance, route.handler_name), methods=[route.method], name=route.handler_name
            )
        except Exception as exc:
            where = f"{cls.__name__}.{route.handler_name}"
            raise TypeError(f"route {route.method} {route.path} ({where}) cannot be served: {exc}") from exc
    return served


class Pinged:
    """``GET /ping`` for an app of the user's own: 204 until the app's lifespan has started, then healthy. An app that
    does not speak the lifespan protocol is started at once (the protocol is completed for it)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.ready = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] == "/ping":
            body = b'{"status":"healthy"}' if self.ready else b""
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200 if self.ready else 204, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        else:
            await self.app(scope, receive, send)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "lifespan.startup.complete":
                started = self.ready = True
            elif message["type"].startswith("lifespan.shutdown"):
                self.ready = False
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            if started:
                raise
            # an app without lifespan support (a bare ASGI callable): complete the protocol for it
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.ready = True
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            self.ready = False
            await send({"type": "lifespan.shutdown.complete"})


async def _ping(request: Request) -> Response:
    if request.app.state.ready:
        return JSONResponse({"status": "healthy"})
    return Response(status_code=204)  # initialising: Runpod's load balancer sends no traffic yet


# --------------------------------------------------------------------------------------------------------------------
# Route functions as FastAPI endpoints


def endpoint_for(method: str, path: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """An ``async def`` FastAPI calls for one route: its signature says where each parameter comes from, and it
    calls ``fn`` with them (in a thread for a sync ``def``) and turns the result into a response."""
    signature = inspect.signature(fn)
    hints = _hints(fn, signature)
    in_path = set(path_params(path))
    own: list[inspect.Parameter] = []  # FastAPI reads these as they are (path parameters, Request, Depends, ...)
    plain: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if param.kind in _SKIPPED:
            continue
        param = param.replace(annotation=hints.get(param.name, Any), kind=inspect.Parameter.KEYWORD_ONLY)
        (own if param.name in in_path or _fastapi_own(param) else plain).append(param)
    accepts_extra = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.parameters.values())
    body: type[Any] | None = None
    if method not in BODY_METHODS:
        plain = [_query_list(p) for p in plain]
    elif any(_is_model(p.annotation) for p in plain):
        pass  # Flash hands such a signature to FastAPI unchanged: a model parameter is the body
    elif any(_is_file(p.annotation) for p in plain):
        plain = [_multipart(p) for p in plain]
    elif plain:
        body = _body_model(fn, plain, accepts_extra)
    wrapper_params = own + (plain if body is None else [_body_param(body, plain)])

    async def endpoint(**values: Any) -> Any:
        if body is not None:
            model = values.pop(_BODY)
            if model is not None:
                values.update({p.name: getattr(model, f"p{i}") for i, p in enumerate(plain)})
                values.update(model.model_extra or {})
        args, kwargs = _arguments(signature, values)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            result = fn(*args, **kwargs)
        else:
            result = await run_in_threadpool(fn, *args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return respond(result)

    endpoint.__signature__ = inspect.Signature(wrapper_params)  # type: ignore[attr-defined]
    endpoint.__name__ = fn.__name__
    endpoint.__qualname__ = fn.__qualname__
    endpoint.__doc__ = fn.__doc__
    return endpoint


def _hints(fn: Callable[..., Any], signature: inspect.Signature) -> dict[str, Any]:
    """The parameters' annotations as objects (a module with ``from __future__ import annotations`` has strings).
    One that cannot be resolved (a name imported only under TYPE_CHECKING) becomes Any, with a line on stderr."""
    try:
        return typing.get_type_hints(fn, include_extras=True)
    except Exception as exc:
        unresolved = f"flashpoint: the annotations of {fn.__qualname__} cannot all be resolved ({exc})"
        print(f"{unresolved}; those that cannot are not checked", file=sys.stderr, flush=True)
        return {
            name: Any
            if isinstance(param.annotation, str) or param.annotation is inspect.Parameter.empty
            else param.annotation
            for name, param in signature.parameters.items()
        }


def _arguments(signature: inspect.Signature, values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Positional-only parameters by position (up to the first one left to its default), the rest by name."""
    args: list[Any] = []
    for param in signature.parameters.values():
        if param.kind is not inspect.Parameter.POSITIONAL_ONLY or param.name not in values:
            break
        args.append(values.pop(param.name))
    return args, values


def _strip_optional(annotation: Any) -> Any:
    """``X | None`` (or ``Optional[X]``) as ``X``; ``Annotated[X, ...]`` as ``X``."""
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _fastapi_own(param: inspect.Parameter) -> bool:
    """A parameter FastAPI fills itself: ``Request`` and friends, ``Depends``/``Query``/``Header``/... markers."""
    markers = (params.Param, params.Body, params.Depends)
    if isinstance(param.default, markers):
        return True
    if get_origin(param.annotation) is Annotated and any(isinstance(m, markers) for m in get_args(param.annotation)):
        return True
    kind = param.annotation
    return isinstance(kind, type) and issubclass(kind, HTTPConnection | Response | BackgroundTasks | SecurityScopes)


def _is_model(annotation: Any) -> bool:
    kind = _strip_optional(annotation)
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _is_file(annotation: Any) -> bool:
    kind = _strip_optional(annotation)
    if get_origin(kind) is list and get_args(kind):
        kind = get_args(kind)[0]
    return kind is bytes or (isinstance(kind, type) and issubclass(kind, UploadFile))


def _default(param: inspect.Parameter) -> Any:
    return ... if param.default is inspect.Parameter.empty else param.default


def _query_list(param: inspect.Parameter) -> inspect.Parameter:
    """A GET parameter typed as a list, set or tuple: a repeated query parameter (FastAPI would read a body)."""
    if get_origin(_strip_optional(param.annotation)) in (list, set, tuple, frozenset):
        return param.replace(default=Query(_default(param)))
    return param


def _multipart(param: inspect.Parameter) -> inspect.Parameter:
    """Flash's multipart rule: ``bytes`` parameters are files (``File``), every other one a form field (``Form``)."""
    marker = File if _is_file(param.annotation) else Form
    return param.replace(default=marker(_default(param)))


def _body_model(fn: Callable[..., Any], plain: list[inspect.Parameter], accepts_extra: bool) -> type[Any]:
    """A pydantic model whose fields are the parameters, keyed by their names in JSON. Fields are named ``p0``,
    ``p1``... inside (with the parameter name as alias), so no parameter name can clash with pydantic's own."""
    fields: dict[str, Any] = {f"p{i}": (p.annotation, Field(_default(p), alias=p.name)) for i, p in enumerate(plain)}
    config = ConfigDict(extra="allow" if accepts_extra else "ignore", arbitrary_types_allowed=True)
    model: type[Any] = create_model(f"{fn.__name__}_body", __config__=config, **fields)
    return model


def _body_param(model: type[Any], plain: list[inspect.Parameter]) -> inspect.Parameter:
    # a body is needed when a parameter has no default; otherwise it may be left out (the function's defaults apply)
    required = any(p.default is inspect.Parameter.empty for p in plain)
    return inspect.Parameter(
        _BODY, inspect.Parameter.KEYWORD_ONLY, annotation=model, default=Body(...) if required else Body(None)
    )


# --------------------------------------------------------------------------------------------------------------------
# Results as responses


def respond(result: Any) -> Any:
    """A response object as it is; a generator as a JSON-lines stream; anything else for FastAPI to send as JSON."""
    if isinstance(result, Response):
        return result
    if inspect.isasyncgen(result):
        return StreamingResponse(_async_lines(result), media_type="application/jsonl")
    if inspect.isgenerator(result):
        # a sync iterator: Starlette steps it in a thread, so a slow step never blocks the worker's loop
        return StreamingResponse(_lines(result), media_type="application/jsonl")
    return result


def _line(item: Any) -> bytes:
    text = json.dumps(jsonable_encoder(item), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode() + b"\n"


async def _async_lines(items: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    async for item in items:
        yield _line(item)


def _lines(items: Iterator[Any]) -> Iterator[bytes]:
    for item in items:
        yield _line(item)


# --------------------------------------------------------------------------------------------------------------------
# Middleware


def _error_body(code: str, error: str, message: str, **extra: Any) -> bytes:
    """The house error shape (``api/errors.py``): ``error`` to show, ``code`` to branch on, ``message``."""
    return json.dumps({"error": error, "code": code, "message": message, **extra}).encode()


async def _send_json(send: Send, status: int, payload: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class RouteSecret:
    """Serve only requests that carry the worker's route secret (the server's proxy sends it); 403 ``forbidden``
    otherwise. The header is taken out of the request the app sees. Lifespan events pass."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        if not secret:
            raise ValueError("a route secret cannot be empty")
        self.app = app
        self.secret = secret.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        presented: list[bytes] = []
        kept: list[tuple[bytes, bytes]] = []
        for name, value in scope["headers"]:
            if name == _SECRET:
                presented.append(value)
            else:
                kept.append((name, value))
        # exactly one copy, and the right one (compare_digest takes as long whatever the first wrong byte)
        if len(presented) != 1 or not hmac.compare_digest(presented[0], self.secret):
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            message = (
                f"this route worker serves only its server's proxy, which sends {ROUTE_SECRET_HEADER} (the worker's "
                f"{ROUTE_SECRET_ENV}); call the endpoint through the server: METHOD <server>/<endpoint>/<path>"
            )
            await _send_json(send, 403, _error_body("forbidden", message, message))
            return
        await self.app({**scope, "headers": kept}, receive, send)


_SECRET = ROUTE_SECRET_HEADER.encode()


class Errors:
    """A route function that raised: its traceback on stderr, and 500 with its type and message when nothing was sent
    yet; a stream that fails midway is cut short (the client sees an incomplete response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            where = f"{scope.get('method')} {scope.get('path')}"
            print(f"flashpoint: {where} raised:", file=sys.stderr)
            traceback.print_exception(type(exc), exc, _from_user_code(exc.__traceback__), file=sys.stderr)
            sys.stderr.flush()
            if started:
                return
            kind = type(exc).__qualname__
            if type(exc).__module__ != "builtins":
                kind = f"{type(exc).__module__}.{kind}"
            await _send_json(send, 500, _error_body("handler_error", f"{kind}: {exc}", str(exc), type=kind))


#: where the frames between the server and a route function live (left out of the traceback a worker prints)
_FRAMEWORK = tuple(
    os.path.dirname(module.__file__ or "") + os.sep for module in (anyio, asyncio, fastapi, starlette)
) + (__file__, bodylimit.__file__)


def _from_user_code(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback from the first frame of the user's code (the route function); all of it when it has none (an
    output JSON cannot carry fails in FastAPI's encoder)."""
    first = tb
    while first is not None and first.tb_frame.f_code.co_filename.startswith(_FRAMEWORK):
        first = first.tb_next
    return first if first is not None else tb
