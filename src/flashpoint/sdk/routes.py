"""HTTP-route endpoints: ``@api.get/post/put/delete/patch(path)`` on an ``Endpoint``, checked at decoration time as
Runpod Flash checks them, and how a worker loads the routes (its ``WorkerTarget``).

``Endpoint`` takes the route decorators from ``RouteMethods``; ``endpoint.py`` calls :meth:`RouteMethods._queue_target`
when an ``Endpoint`` decorates a function or class, so that one endpoint is a queue endpoint or a set of routes, never
both. Domain layer: standard library and ``spec`` only (cloudpickle is imported when a target is pickled).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeVar

from flashpoint.errors import InvalidEndpointError
from flashpoint.spec import (
    RESERVED_NAMES,
    RESERVED_PATHS,
    ROUTE_METHODS,
    EndpointSpec,
    RouteSpec,
    ServerlessScalerType,
    WorkerTarget,
    invalid,
)

__all__ = [
    "ROUTES_KEY",
    "Route",
    "RouteDecorator",
    "RouteMethods",
    "is_route_endpoint",
    "path_params",
    "route_table",
    "route_target",
]

#: the key of the pickled table a route worker loads with ``--routes --pickle``:
#: ``{ROUTES_KEY: [(method, path, function), ...]}``
ROUTES_KEY = "flashpoint.sdk.routes"

#: one route as a worker serves it: (method, path, function)
Route = tuple[str, str, Callable[..., Any]]

_F = TypeVar("_F", bound=Callable[..., Any])

#: ``{name}`` or ``{name:convertor}`` with one of Starlette's convertors
_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?::(str|path|int|float|uuid))?\}")
#: the queue verbs a route endpoint does not have (a clear AttributeError instead of Python's)
_QUEUE_VERBS = frozenset({"run", "runsync", "stream", "cancel", "job", "explain", "local"})


class RouteDecorator(Protocol):
    """What ``api.post("/path")`` returns: a decorator that registers the function and returns it unchanged."""

    def __call__(self, fn: _F, /) -> _F: ...


class RouteMethods:
    """The route decorators of ``Endpoint``: ``@api.post("/compute")`` declares a route served by the function and
    returns the function itself, so calling it from Python runs it in the calling process (as Flash does).

    Each declaration replaces ``api.spec`` with one listing every route so far (``kind="routes"``; the scaler is
    ``REQUEST_COUNT`` unless ``scaler_type`` was given, as Flash's load-balanced endpoints default to).
    """

    spec: EndpointSpec
    #: the declared routes with their functions, in declaration order (a tuple: replaced, never mutated)
    _route_functions: tuple[tuple[RouteSpec, Callable[..., Any]], ...] = ()
    #: this Endpoint decorated a function or class (a queue endpoint): it takes no routes
    _queue_used: bool = False
    #: ``scaler_type`` was given (set by ``Endpoint.__new__``): routes keep it instead of REQUEST_COUNT
    _scaler_given: bool = False

    def get(self, path: str, data: None = None) -> RouteDecorator:
        """Declare a ``GET`` route: its parameters come from the query string and the path's ``{name}`` parts.

        Example:
            >>> api = Endpoint(name="my-api", gpu=GpuGroup.ANY, workers=(1, 3))
            >>> @api.get("/health")
            ... async def health() -> dict:
            ...     return {"status": "ok"}
        """
        return self._declare_route("GET", path, data)

    def post(self, path: str, data: None = None) -> RouteDecorator:
        """Declare a ``POST`` route: the JSON body's fields are its parameters (``bytes`` ones: a multipart upload).

        Raises:
            InvalidEndpointError: at once, for an endpoint without ``name=``, a name or path the server reserves, a
                path not starting with ``/``, an endpoint that already decorates a function or class; when the
                decorator is applied, for a method and path declared already or something other than a function.

        Example:
            >>> @api.post("/compute")
            ... async def compute(numbers: list[float]) -> dict:
            ...     return {"sum": sum(numbers)}
        """
        return self._declare_route("POST", path, data)

    def put(self, path: str, data: None = None) -> RouteDecorator:
        """Declare a ``PUT`` route (parameters from the JSON body and the path), as :meth:`post`."""
        return self._declare_route("PUT", path, data)

    def delete(self, path: str, data: None = None) -> RouteDecorator:
        """Declare a ``DELETE`` route (parameters from the JSON body and the path), as :meth:`post`."""
        return self._declare_route("DELETE", path, data)

    def patch(self, path: str, data: None = None) -> RouteDecorator:
        """Declare a ``PATCH`` route (parameters from the JSON body and the path), as :meth:`post`."""
        return self._declare_route("PATCH", path, data)

    def worker_target(self) -> WorkerTarget:
        """How a worker loads this endpoint's routes (see :func:`route_target`)."""
        return route_target(self)

    def _declare_route(self, method: str, path: str, data: Any) -> RouteDecorator:
        if data is not None:
            raise TypeError(
                f"data is only for clients (Endpoint(id=...)), which call a served route; to declare a route write "
                f'@api.{method.lower()}("/path") with the path alone'
            )
        spec = self.spec
        _check_declaration(spec, method, path)
        if self._queue_used:
            raise invalid(
                spec.name,
                f"it already decorates a function or class (a queue endpoint) and cannot also serve "
                f"{method} {path}: an endpoint is either a queue endpoint or a set of routes; declare the routes on "
                "an Endpoint of their own, e.g. api = Endpoint(name='my-api', ...)",
            )

        def decorator(fn: _F, /) -> _F:
            self._add(RouteSpec(method, path, _check_function(self.spec, method, path, fn)), fn)
            return fn

        return decorator

    def _add(self, route: RouteSpec, fn: Callable[..., Any]) -> None:
        shape = _shape(route.path)
        for existing, existing_fn in self._route_functions:
            if existing.method == route.method and _shape(existing.path) == shape:
                same = "" if existing.path == route.path else f" (as {existing.path}: the same path)"
                raise invalid(
                    self.spec.name,
                    f"duplicate route {route.method} {route.path}{same}: already served by "
                    f"{existing_fn.__name__}(); give one of them another path or method",
                )
        self._route_functions = (*self._route_functions, (route, fn))
        self.spec = dataclasses.replace(
            self.spec,
            kind="routes",
            routes=tuple(r for r, _ in self._route_functions),
            scaler_type=self.spec.scaler_type if self._scaler_given else ServerlessScalerType.REQUEST_COUNT,
        )

    def _queue_target(self, target: Any) -> None:
        """Called when this Endpoint decorates ``target``: refused on a route endpoint, remembered otherwise."""
        if self._route_functions:
            what = getattr(target, "__name__", None)
            shown = ", ".join(f"{r.method} {r.path}" for r, _ in self._route_functions)
            if not (inspect.isfunction(target) or inspect.isclass(target)) or what is None:
                raise invalid(
                    self.spec.name,
                    f"it serves HTTP routes ({shown}) and takes no queue calls; call a route over HTTP through the "
                    f"server, e.g. await Endpoint(id={self.spec.name!r}).post('/path', {{...}}), or call its "
                    "function directly (it runs in this process)",
                )
            raise invalid(
                self.spec.name,
                f"it serves HTTP routes ({shown}) and cannot also decorate {what}: an endpoint is either a queue "
                f"endpoint or a set of routes; declare {what} on an Endpoint of its own, e.g. "
                f"@Endpoint(name={what!r}, ...)",
            )
        self._queue_used = True

    if not TYPE_CHECKING:  # at run time only: mypy keeps flagging unknown attributes of Endpoint

        def __getattr__(self, attr: str) -> NoReturn:
            if attr in _QUEUE_VERBS and "spec" in vars(self):
                raise AttributeError(_no_queue_verb(self.spec, attr, self._route_functions))
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {attr!r}")


def _no_queue_verb(spec: EndpointSpec, attr: str, routes: Sequence[tuple[RouteSpec, Callable[..., Any]]]) -> str:
    if routes:
        route, fn = routes[0]
        return (
            f"Endpoint {spec.name!r} serves HTTP routes and has no {attr}(): call {fn.__name__}(...) to run it in "
            f"this process, or call the route over HTTP through the server: await Endpoint(id={spec.name!r})."
            f"{route.method.lower()}({route.path!r}, ...)"
        )
    return (
        f"Endpoint(...) declares an endpoint and has no {attr}(): decorate a function or class with it and call that "
        "(@Endpoint(name=..., gpu=...) async def fn(...)), or declare HTTP routes on it (@api.post('/path'))"
    )


def _check_declaration(spec: EndpointSpec, method: str, path: str) -> None:
    """Flash's checks when ``api.post(path)`` is called, plus the names and paths only flashpoint's server needs."""
    if not spec.name:
        raise InvalidEndpointError(
            "Endpoint: name is required for an endpoint with HTTP routes (the server serves them under /NAME/...); "
            "write api = Endpoint(name='my-api', ...) and then @api.post('/path')"
        )
    if spec.name in RESERVED_NAMES:
        raise invalid(
            spec.name,
            f"the name {spec.name!r} is taken by the server's own routes ({', '.join(RESERVED_NAMES)}), so its "
            f"routes could not be reached at /{spec.name}/...; give the endpoint another name, e.g. "
            f"name='{spec.name}-api'",
        )
    if method not in ROUTE_METHODS:  # the decorators pass one of them; kept as Flash keeps it
        raise invalid(spec.name, f"method must be one of {', '.join(ROUTE_METHODS)}, got {method!r}")
    if not isinstance(path, str) or not path.startswith("/"):
        raise invalid(spec.name, f"a route path starts with '/', e.g. @api.post('/compute'); got {path!r}")
    if path in RESERVED_PATHS:
        raise invalid(
            spec.name,
            f"path {path!r} is reserved ({', '.join(RESERVED_PATHS)}: a worker's health check and Flash's job "
            "route); choose another path",
        )
    bad = _path_problem(path)
    if bad:
        raise invalid(spec.name, f"route path {path!r}: {bad}")


def _path_problem(path: str) -> str | None:
    """What makes a path unservable behind the server's ``/NAME`` prefix, or None."""
    if any(c.isspace() or not c.isprintable() for c in path) or "?" in path or "#" in path:
        return "a path has no spaces, control characters, '?' or '#' (query parameters are the function's own)"
    if any(segment in (".", "..") for segment in path.split("/")):
        return "a path has no '.' or '..' segments"
    if "{" in _PARAM.sub("", path) or "}" in _PARAM.sub("", path):
        return (
            "path parameters are written {name} (a Python identifier) or {name:int}, with one of the convertors "
            "str, path, int, float, uuid"
        )
    return None


def path_params(path: str) -> tuple[str, ...]:
    """The names of a route path's parameters: ``/items/{item_id}/{rest:path}`` gives ``("item_id", "rest")``."""
    return tuple(match.group(1) for match in _PARAM.finditer(path))


def _shape(path: str) -> str:
    """A path with its parameters unnamed: ``/items/{a}`` and ``/items/{b}`` are one route."""
    return _PARAM.sub(lambda m: "{:" + (m.group(2) or "str") + "}", path)


def _check_function(spec: EndpointSpec, method: str, path: str, fn: Any) -> str:
    """The name of the function a route decorates; only plain functions (``def``, ``async def``, generators)."""
    if not inspect.isfunction(fn):
        kind = "an endpoint handle" if hasattr(fn, "spec") else type(fn).__name__
        raise invalid(
            spec.name,
            f"{method} {path} is served by a function (def or async def), not {kind} ({fn!r}); put "
            f'@api.{method.lower()}("{path}") directly on the function',
        )
    return str(fn.__name__)


# --------------------------------------------------------------------------------------------------------------------
# Discovery and workers


def is_route_endpoint(obj: Any) -> bool:
    """An ``Endpoint`` with at least one route (not a client, not a queue handle)."""
    return isinstance(obj, RouteMethods) and bool(obj._route_functions) and "spec" in vars(obj)


def route_target(endpoint: RouteMethods) -> WorkerTarget:
    """How a worker loads a route endpoint: ``import_path="module:attr"`` when every route function is defined at
    the top level of one importable module that holds the ``Endpoint`` in a module-level name (the worker's import
    declares the same routes again), else the routes table, ``{ROUTES_KEY: [(method, path, function), ...]}``,
    cloudpickled (functions in ``__main__`` or in a function travel by value).

    Raises:
        InvalidEndpointError: the endpoint declares no route yet.
    """
    entries = endpoint._route_functions
    if not entries:
        raise invalid(
            getattr(getattr(endpoint, "spec", None), "name", None),
            "it declares no route: add one with @api.post('/path') (or get/put/delete/patch) before serving it",
        )
    path = _import_path(endpoint)
    if path is not None:
        return WorkerTarget(import_path=path)
    from flashpoint.wire.pickling import dumps_code

    table = [(route.method, route.path, fn) for route, fn in entries]
    return WorkerTarget(pickled=dumps_code({ROUTES_KEY: table}))


def _import_path(endpoint: RouteMethods) -> str | None:
    functions = [fn for _, fn in endpoint._route_functions]
    modules = {getattr(fn, "__module__", None) for fn in functions}
    if len(modules) != 1:
        return None  # routes declared from several modules: no one import declares them all
    name = modules.pop()
    if not name or name == "__main__" or any("<locals>" in fn.__qualname__ for fn in functions):
        return None
    module = sys.modules.get(name)
    if module is None:
        return None
    for attr, value in vars(module).items():
        if value is endpoint and not attr.startswith("__"):
            return f"{name}:{attr}"
    return None


def route_table(obj: Any) -> list[Route]:
    """The routes a worker serves, from what ``--routes`` loaded: an ``Endpoint`` with routes (``--import``) or a
    routes table (``--pickle``).

    Raises:
        TypeError: ``obj`` is neither (the import path names something else).
    """
    if isinstance(obj, dict) and ROUTES_KEY in obj:
        return [(str(method), str(path), fn) for method, path, fn in obj[ROUTES_KEY]]
    if is_route_endpoint(obj):
        return [(route.method, route.path, fn) for route, fn in obj._route_functions]
    raise TypeError(
        f"a route worker serves an Endpoint with routes (--import module:attr) or a routes table (--pickle); "
        f"got {type(obj).__name__}: {obj!r:.200}"
    )
